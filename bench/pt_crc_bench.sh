#!/bin/bash
# pt_crc_bench.sh: what the CRC-32 check of stored zip members costs (docs/PERFORMANCE.md "PyTorch
# zip members: CRC-32"). Writes a PyTorch zip checkpoint of MIB MiB (float32 storages of 16 MiB,
# stored, as torch.save writes them; the pickle made with Python's own pickle module and stand-in
# torch globals), then times, for the binary under test and a reference binary without the check:
#   inspect (lists the tensors: no tensor data read, so no CRC computed) and
#   diff F F (reads every tensor of both sides: each member's CRC computed once per opened file;
#            identical bytes, so diff itself only compares them: the worst case for the check) and
#   quantize F -o D --no-checksums (int8 per channel: every tensor read once, quantized, written).
# Usage: bench/pt_crc_bench.sh TENSORMORPH REF_TENSORMORPH [MIB (default 1024)] [RUNS (default 3)]
set -u
T=${1:?the tensormorph binary}; R=${2:?a reference tensormorph binary}; MIB=${3:-1024}; RUNS=${4:-3}
W=$(mktemp -d "${TMPDIR:-/tmp}/tm_ptcrc.XXXXXX"); trap 'rm -rf "$W"' EXIT
python3 - "$W/big.pt" "$MIB" <<'PY'
import collections, pickle, sys, types, zipfile
torch = types.ModuleType("torch"); utils = types.ModuleType("torch._utils")
class FloatStorage: pass
FloatStorage.__module__ = "torch"
def _rebuild_tensor_v2(*a): pass
_rebuild_tensor_v2.__module__ = "torch._utils"
torch.FloatStorage = FloatStorage; utils._rebuild_tensor_v2 = _rebuild_tensor_v2; torch._utils = utils
sys.modules["torch"] = torch; sys.modules["torch._utils"] = utils
class Storage:
    def __init__(self, key, numel): self.key, self.numel = key, numel
class Tensor:
    def __init__(self, st, rows, cols): self.st, self.rows, self.cols = st, rows, cols
    def __reduce__(self):
        return (_rebuild_tensor_v2, (self.st, 0, (self.rows, self.cols), (self.cols, 1), False, collections.OrderedDict()))
class P(pickle.Pickler):
    def persistent_id(self, o):
        return ("storage", FloatStorage, o.key, "cpu", o.numel) if isinstance(o, Storage) else None
rows, cols = 4096, 1024                       # 16 MiB of float32 each
n = max(1, int(sys.argv[2]) // 16)
sd = collections.OrderedDict()
for i in range(n): sd["layers.%d.weight" % i] = Tensor(Storage(str(i), rows * cols), rows, cols)
import io
buf = io.BytesIO(); P(buf, protocol=2).dump(sd)
import struct
chunk = struct.pack("<%df" % cols, *[((j * 37) % 1000) / 1000.0 - 0.5 for j in range(cols)]) * rows
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_STORED) as z:
    z.writestr("big/data.pkl", buf.getvalue())
    z.writestr("big/byteorder", "little")
    for i in range(n):
        with z.open("big/data/%d" % i, "w", force_zip64=True) as f: f.write(chunk)
PY
ls -l "$W/big.pt"
cat "$W/big.pt" >/dev/null  # in the page cache for every run
for b in "$T" "$R"; do
    for what in inspect diff quantize; do
        for k in $(seq "$RUNS"); do
            if [ "$what" = inspect ]; then
                /usr/bin/time -f "$b $what %e s wall, %U s user, %S s sys (max RSS %M KiB)" "$b" inspect "$W/big.pt" -q --no-tensors >/dev/null
            elif [ "$what" = diff ]; then
                /usr/bin/time -f "$b $what %e s wall, %U s user, %S s sys (max RSS %M KiB)" "$b" diff "$W/big.pt" "$W/big.pt" -q >/dev/null
            else
                rm -rf "$W/q"
                /usr/bin/time -f "$b $what %e s wall, %U s user, %S s sys (max RSS %M KiB)" "$b" quantize "$W/big.pt" -o "$W/q" --no-checksums -q >/dev/null
            fi
        done
    done
done
