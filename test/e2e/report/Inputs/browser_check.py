"""Opens an HTML page in headless Chromium and checks what it draws.

Usage: browser_check.py PAGE.html --screenshot OUT.png [--size W,H]
                        [--min-drawn PERCENT]

Chromium (Debian's `chromium`) screenshots the page; the PNG is decoded
here (zlib and struct, no imaging library) and must not be blank: at least
--min-drawn percent (default 2) of its pixels differ from its most common
colour. Chromium's log must hold no console message and no uncaught
exception: the pages have no script, and Chromium's log does not tell a
console.error from a console.log (`INFO:CONSOLE:1] "text", source: ...`
in Chromium 156, `CONSOLE(1)` in older ones), so any message counts. The
page must not load anything from elsewhere (a `src`, `href` or `url()` to
http, https or `//`): it is viewed offline. Prints `page ok: N% of pixels
drawn, 0 console errors`, or the failure and exits 1; exits 2 when no
Chromium is installed.
"""

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib


def read_png(path):
    """(width, height, rows of RGB(A) tuples as bytes) of an 8-bit PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            if depth != 8 or colour not in (2, 6):
                raise ValueError("PNG of depth %d, colour type %d"
                                 % (depth, colour))
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


# A console message or an uncaught exception in Chromium's log.
CONSOLE = re.compile(r":CONSOLE[(:]\d+|Uncaught")
# A reference that would be fetched from the network when the page is shown.
REMOTE = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']?|url\(\s*["']?"""
                    r"""|@import\s+["'])\s*(?:https?:|//)""", re.IGNORECASE)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("page")
    p.add_argument("--screenshot", required=True)
    p.add_argument("--size", default="1280,2000")
    p.add_argument("--min-drawn", type=float, default=2.0)
    args = p.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("no chromium on PATH (Debian: apt-get install chromium)")
        return 2
    with tempfile.TemporaryDirectory() as profile:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                   "--hide-scrollbars", "--no-first-run",
                   "--user-data-dir=" + profile, "--enable-logging=stderr",
                   "--v=0", "--window-size=" + args.size,
                   "--screenshot=" + os.path.abspath(args.screenshot),
                   "file://" + os.path.abspath(args.page)]
        try:
            run = subprocess.run(command, capture_output=True, text=True,
                                 timeout=120)
        except subprocess.TimeoutExpired:
            print("FAILED: chromium did not finish within 120 s")
            return 1
    log = run.stderr.splitlines()
    errors = [l for l in log if CONSOLE.search(l)]
    if not os.path.exists(args.screenshot):
        print("FAILED: no screenshot (chromium exit %d)\n%s"
              % (run.returncode, "\n".join(log[-20:])))
        return 1
    width, height, channels, rows = read_png(args.screenshot)
    counts = {}
    for row in rows:
        for x in range(0, width * channels, channels):
            px = row[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    background = max(counts.values())
    drawn = 100.0 * (width * height - background) / (width * height)
    with open(args.page, encoding="utf-8", errors="replace") as f:
        remote = REMOTE.findall(f.read())
    if remote:
        print("FAILED: the page loads from the network: %s"
              % ", ".join(sorted(set(remote))))
        return 1
    if errors:
        print("FAILED: %d console messages or uncaught exceptions:\n%s"
              % (len(errors), "\n".join(errors)))
        return 1
    if drawn < args.min_drawn:
        print("FAILED: the page is blank: %.1f%% of pixels drawn" % drawn)
        return 1
    print("page ok: %.0f%% of pixels drawn, 0 console errors" % drawn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
