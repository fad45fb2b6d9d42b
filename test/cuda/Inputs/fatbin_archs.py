"""Lists the GPU architectures whose machine code (and PTX) a binary holds.

Usage: python3 fatbin_archs.py BINARY

Reads the binary's .nv_fatbin section (objcopy) and walks its fat
binaries: a 16-byte header (magic 0xBA55ED50, version, header size, size),
then entries, each with a kind (1: PTX, 2: machine code), its header and
payload sizes and its architecture. Prints one line per kind and
architecture, sorted: "elf sm_80", "ptx sm_90", ... The toolkit here has no
cuobjdump to ask.
"""
import os
import struct
import subprocess
import sys
import tempfile


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fatbin")
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin",
                        binary, out], check=True)
        data = open(out, "rb").read()
    found = set()
    pos = 0
    while pos + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, pos)
        if magic != 0xBA55ED50:
            # Padding between fat binaries.
            pos += 8
            continue
        entry, end = pos + header, pos + header + size
        while entry + 0x20 <= end:
            kind, _, entry_header, payload = struct.unpack_from(
                "<HHIQ", data, entry)
            arch, = struct.unpack_from("<I", data, entry + 0x1C)
            found.add(("ptx" if kind == 1 else "elf", arch))
            if entry_header == 0:
                break
            entry += entry_header + payload
        pos = end
    if not found:
        sys.exit("error: %s has no CUDA code" % binary)
    for kind, arch in sorted(found):
        print("%s sm_%d" % (kind, arch))


if __name__ == "__main__":
    main()
