/* fuzz_npy_open.c: libFuzzer target for the NumPy reader (buffer entry point: a .npy image or an
** .npz archive, through libzip and the central-directory walk). When an input opens, the
** listing must be self-consistent and every tensor readable through the view (Fortran-order
** and big-endian branches included) without reading outside its bytes.
** Build: -DTM_FUZZ=ON (clang); without libFuzzer, link fuzz/standalone_main.c instead. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph.h"
#include "fuzz_check.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the public buffer opener, asked for this format (a zip image is read as that format) */
static tm_status open_npy(const void *data, size_t n, const char *name, const tm_open_params *p,
                         tm_file **out, tm_err *err) {
    tm_open_params q = p ? *p : tm_open_params_default();
    q.format = TM_FMT_NPY;
    return tm_open_buffer(data, n, name, &q, out, err);
}

static void check_file(const tm_file *f, const uint8_t *data, size_t size) {
    /* a zip image (.npz / zip .pt) opens before its members' CRC-32 are checked, on a member's
    ** first read (src/formats/membercrc.c): a damaged member then fails that read with a message;
    ** every other opened file must read */
    const int zip = size >= 4 && data[0] == 'P' && data[1] == 'K';
    tm_fuzz_check_file(f, !zip);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return tm_fuzz_open_and_check(open_npy, "fuzz.npy", data, size, 0, check_file);
}
