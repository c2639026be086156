/*
** pt.h: the PyTorch readers' private interface. pt_unpickle.c turns a pickle stream into a
** tree of inert values (nothing is ever called or imported); pt_zip.c walks that tree into
** tensors, for zip checkpoints and the legacy (pre-1.6) stream format.
*/
#ifndef TM_FORMATS_PT_H
#define TM_FORMATS_PT_H

#include "file.h"

/* Globals the unpickler resolves (the allow-list; every other global is refused). */
typedef enum pt_global {
    PT_G_ORDERED_DICT = 1,      /* collections.OrderedDict                                  */
    PT_G_REBUILD_TENSOR,        /* torch._utils._rebuild_tensor                             */
    PT_G_REBUILD_TENSOR_V2,     /* torch._utils._rebuild_tensor_v2                          */
    PT_G_REBUILD_PARAMETER,     /* torch._utils._rebuild_parameter                          */
    PT_G_REBUILD_PARAMETER_ST,  /* torch._utils._rebuild_parameter_with_state               */
    PT_G_REBUILD_QTENSOR,       /* torch._utils._rebuild_qtensor                            */
    PT_G_STORAGE,               /* torch.<Type>Storage; dtype in pv.dtype                   */
    PT_G_DTYPE,                 /* torch.float32, torch.qint8 ...; dtype in pv.dtype        */
    PT_G_QSCHEME                /* torch.per_tensor_affine / per_channel_affine; in pv.i    */
} pt_global;

enum { PT_QS_PER_TENSOR_AFFINE = 1, PT_QS_PER_CHANNEL_AFFINE = 2 };

typedef enum pv_kind {
    PV_NONE, PV_BOOL, PV_INT, PV_BIGINT, PV_FLOAT, PV_STR, PV_BYTES, PV_TUPLE, PV_LIST, PV_DICT,
    PV_GLOBAL, PV_STORAGE, PV_TENSOR
} pv_kind;

typedef struct pv pv;
typedef struct pt_tensor {
    pv      *storage;          /* PV_STORAGE                                                */
    int64_t  storage_offset;   /* elements                                                  */
    int      ndim;
    int64_t  shape[TM_MAX_DIMS];
    int64_t  stride[TM_MAX_DIMS];
    int      qscheme;          /* 0 plain, PT_QS_*                                          */
    double   scale;            /* per-tensor                                                */
    int64_t  zero_point;       /* per-tensor                                                */
    pv      *scales, *zero_points; /* per-channel: PV_TENSOR each                            */
    int64_t  axis;             /* per-channel                                               */
} pt_tensor;

struct pv {
    pv_kind     kind;
    int64_t     i;             /* INT, BOOL; GLOBAL: pt_global; QSCHEME: PT_QS_*             */
    int64_t     sub;           /* GLOBAL QSCHEME: PT_QS_*                                   */
    double      d;             /* FLOAT                                                     */
    const char *s;             /* STR, BYTES, BIGINT bytes (borrowed from the pickle image) */
    size_t      slen;
    pv        **items;         /* TUPLE, LIST; DICT: keys and values interleaved            */
    int64_t     n, cap;        /* items used (DICT: 2 x pairs), allocated                   */
    tm_dtype    dtype;         /* GLOBAL STORAGE/DTYPE, STORAGE                            */
    int         qdtype;        /* 1 for QInt8/QUInt8/QInt32 storages and dtypes             */
    const char *key;           /* STORAGE: its key in the archive / legacy stream (NUL-term) */
    int64_t     numel;         /* STORAGE: elements                                         */
    uint64_t    pos;           /* byte of the pickle where the value was made (messages)    */
    pt_tensor  *t;             /* TENSOR                                                    */
    pv         *next;          /* STORAGE: the previous storage made (pt_arena_storages)    */
};

typedef struct pt_arena pt_arena; /* owns every value of one or more unpickled streams */

pt_arena *pt_arena_new(void);
void      pt_arena_free(pt_arena *a);
/* Every PV_STORAGE made so far, newest first, chained through pv.next. */
pv       *pt_arena_storages(const pt_arena *a);

/* Unpickle one pickle starting at buf[*pos] (protocol 0-5 framing, the opcodes of a state_dict).
** legacy: persistent ids are the 6-tuples of the legacy format (else the zip 5-tuples).
** On success *out is the value left by STOP and *pos the byte after STOP.
** where: the file (and member) for messages; base_off: offset of buf[0] in that file.
** Returns TM_OK | TM_E_CORRUPT | TM_E_UNSUPPORTED (opcode or global, named) | TM_E_LIMIT
** | TM_E_NOMEM. */
tm_status pt_unpickle(pt_arena *a, const uint8_t *buf, uint64_t n, uint64_t *pos, int legacy,
                      const char *where, uint64_t base_off, pv **out, tm_err *err);

#define PT_MAX_STACK   (1 << 20)   /* values on the unpickler stack                       */
#define PT_MAX_MEMO    (1 << 22)   /* memo slots                                           */
#define PT_MAX_VALUES  (1 << 24)   /* values made from one file                            */
#define PT_MAX_MARKS   (1 << 16)   /* nested MARKs                                         */

#endif
