"""Writes damaged copies of a rank-program file for the error tests.

Usage: python3 damage_mrp.py IN.mrp OUT_DIR

OUT_DIR gets truncated.mrp (cut inside the payload), header.mrp (a byte
of the header changed), payload.mrp (a byte of the payload changed),
newer.mrp (format version 99, the header's checksum made to match) and
padded.mrp (bytes after the payload).
"""

import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def main():
    src, out = sys.argv[1], sys.argv[2]
    data = open(src, "rb").read()
    os.makedirs(out, exist_ok=True)

    def write(name, content):
        with open(os.path.join(out, name), "wb") as f:
            f.write(content)

    write("truncated.mrp", data[: 32 + (len(data) - 32) // 2])
    header = bytearray(data)
    header[17] ^= 0x01  # the payload size
    write("header.mrp", bytes(header))
    payload = bytearray(data)
    payload[len(data) // 2] ^= 0x40
    write("payload.mrp", bytes(payload))
    newer = bytearray(data)
    newer[8:12] = struct.pack("<I", 99)
    newer[28:32] = struct.pack("<I", crc32c(bytes(newer[:28])))
    write("newer.mrp", bytes(newer))
    write("padded.mrp", data + b"\0\0\0\0")


if __name__ == "__main__":
    main()
