"""Checks a profile written by merak-exec --profile-hardware: every figure
there and positive, the GEMM table ascending, every collective measured over
the group sizes given. Timings are never compared with anything."""
import argparse
import json
import sys


def fail(message):
    sys.exit("check_hardware_profile: " + message)


def positive(doc, key):
    value = doc.get(key)
    if not isinstance(value, (int, float)) or not value > 0:
        fail(f"{key} is {value!r}, expected a positive number")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("--name", required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--groups", type=int, nargs="*", default=[])
    args = parser.parse_args()
    with open(args.profile) as f:
        doc = json.load(f)
    if doc.get("source") != "measured" or doc.get("name") != args.name:
        fail(f"source {doc.get('source')!r}, name {doc.get('name')!r}")
    if not str(doc.get("device", "")).startswith("cpu"):
        fail(f"device {doc.get('device')!r}")
    if doc.get("devices_per_node") != args.devices:
        fail(f"devices_per_node {doc.get('devices_per_node')!r}")
    for key in ("peak_flops", "memory_bandwidth", "memory_capacity",
                "kernel_overhead", "collective_bandwidth", "link_bandwidth"):
        positive(doc, key)
    points = doc.get("gemm", {}).get("f32", [])
    if len(points) < 3:
        fail(f"{len(points)} f32 GEMM points, expected at least 3")
    flops = [p["flops"] for p in points]
    if flops != sorted(set(flops)):
        fail(f"f32 GEMM sizes {flops} do not ascend")
    if any(not p["rate"] > 0 for p in points):
        fail("an f32 GEMM rate is not positive")
    if doc["peak_flops"] != max(p["rate"] for p in points):
        fail("peak_flops is not the best f32 rate")
    found = {(c["op"], c["group"]) for c in doc.get("collectives", [])
             if c["bus_bandwidth"] > 0 and c["latency"] >= 0
             and c["inter_node"] is False}
    for group in args.groups:
        for op in ("allreduce", "allgather", "reducescatter", "alltoall"):
            if (op, group) not in found:
                fail(f"no {op} over {group} ranks")
    if args.groups:
        intra = doc.get("p2p", {}).get("intra_node", {})
        positive(intra, "bandwidth")
        overlap = doc.get("overlap_coefficient")
        if not isinstance(overlap, (int, float)) or not 1 <= overlap <= 2:
            fail(f"overlap_coefficient is {overlap!r}, expected 1 to 2")
        stalls = [c.get("stall") for c in doc.get("collectives", [])]
        stalls.append(intra.get("stall"))
        for stall in stalls:
            if not isinstance(stall, (int, float)) or not 0 <= stall < 1:
                fail(f"a stall is {stall!r}, expected 0 to 1 s")
    print("profile ok:", len(points), "f32 GEMM sizes,",
          len(doc.get("collectives", [])), "collectives")


if __name__ == "__main__":
    main()
