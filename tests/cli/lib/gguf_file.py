"""gguf_file.py: a small GGUF v3 reader for the shell tests of tests/cli (keys and tensor table,
per the GGUF spec: ../shared/formats), independent of the library under test.

read(path) -> (kv, tensors): kv maps each key to (value type id, value); tensors is a list of
[name, ne (tuple), ggml type id, offset relative to the data section, bytes], where bytes runs to
the next tensor's offset (or the file's end) with trailing zero padding stripped."""
import struct

SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read(path):
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF" and struct.unpack_from("<I", b, 4)[0] == 3, path + ": not GGUF v3"
    nt, nkv = struct.unpack_from("<QQ", b, 8)
    off, kv, ts = 24, {}, []

    def s():
        nonlocal off
        (n,) = struct.unpack_from("<Q", b, off)
        off += 8 + n
        return b[off - n:off].decode()

    for _ in range(nkv):
        k = s()
        (t,) = struct.unpack_from("<I", b, off)
        off += 4
        if t == 8:
            v = s()
        elif t == 9:
            et, cnt = struct.unpack_from("<IQ", b, off)
            off += 12
            if et == 8:
                v = [s() for _ in range(cnt)]
            else:
                v = b[off:off + cnt * SZ[et]]
                off += cnt * SZ[et]
        else:
            (v,) = struct.unpack_from("<" + FMT[t], b, off)
            off += SZ[t]
        kv[k] = (t, v)
    for _ in range(nt):
        name = s()
        (nd,) = struct.unpack_from("<I", b, off)
        off += 4
        ne = struct.unpack_from("<%dQ" % nd, b, off)
        off += 8 * nd
        ty, o = struct.unpack_from("<IQ", b, off)
        off += 12
        ts.append([name, ne, ty, o])
    align = kv.get("general.alignment", (4, 32))[1]
    start = (off + align - 1) // align * align
    ends = sorted(t[3] for t in ts)
    for t in ts:
        later = [e for e in ends if e > t[3]]
        nxt = later[0] if later else len(b) - start
        t.append(b[start + t[3]:start + nxt].rstrip(b"\0"))
    return kv, ts
