#!/usr/bin/env python3
"""Writes copies of templates/attention_decode.cuh and templates/prep_attention.cuh with KILN_TRACE(n)
marks (trace_attention.cu records a clock at each) into OUTDIR, from the templates of the tree it
runs in (or --templates DIR: another tree's, a variant under test). Each mark goes after a fixed
line of the source; a line that is gone (the template changed) stops it with the line's text, so
the marks never land somewhere else silently.

    python3 tools/bench/trace_attention/make_traced.py OUTDIR [--templates DIR]
"""
import argparse
import pathlib
import sys

def after(anchor, mark):
    """The edit that puts `mark` right after `anchor`."""
    return anchor, anchor + mark


# (anchor text, its replacement): each anchor must occur once. Marks 0-3 and 9 in the kernel, 4-8
# inside DecodePartition::finish; the phases between them are those trace_attention.cu prints.
DECODE_EDITS = [
    after("    // ---- scores: s[g][key] = q_g · k_key (log2 units) ----\n"
          "    const int passes = n > first ? ceil_div(n - first, kPassKeys) : 0;\n", "    KILN_TRACE(4);\n"),
    after("    ring_start(cache, page_ids, kv_head, first, passes, 1, lane, tid, ring);\n    sync();\n",
          "    KILN_TRACE(5);\n"),
    after("        head_sum[g] = l;\n      }\n    }\n    sync();\n", "    KILN_TRACE(6);\n"),
    after("    sync();  // everyone is done with the scores: their space becomes `partial`\n", "    KILN_TRACE(7);\n"),
    after("            }\n          }\n        }\n    }\n    sync();\n", "    KILN_TRACE(8);\n"),
]
PREP_EDITS = [
    after("  const int seq = blockIdx.x, kv_head = blockIdx.y, launched = gridDim.z, tid = threadIdx.x;\n",
          "  KILN_TRACE(0);\n"),
    after("                                       part == parts - 1, attn_smem, tid, [] { __syncthreads(); });\n",
          "  KILN_TRACE(1);\n"),
    after("  pdl_release_and_wait();\n", "  KILN_TRACE(2);\n"),
    after("  unsigned done = 0;\n", "  KILN_TRACE(3);\n"),
    # The attention's end: before the early return of a sequence without partitions to merge.
    ("  if (parts <= 1) return;", "  KILN_TRACE(9);\n  if (parts <= 1) return;"),
    # The traced copy of attention_decode.cuh instead of the tree's.
    ('#include "templates/attention_decode.cuh"', '#include "attention_decode_traced.cuh"'),
]


def edit(text, edits, name):
    for anchor, replacement in edits:
        if text.count(anchor) != 1:
            sys.exit(f"make_traced.py: {name}: expected this text once, found it {text.count(anchor)} times:\n{anchor}")
        text = text.replace(anchor, replacement)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--templates", default=str(pathlib.Path(__file__).resolve().parents[3] / "templates"))
    a = ap.parse_args()
    src = pathlib.Path(a.templates)
    out = pathlib.Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    decode = edit((src / "attention_decode.cuh").read_text(), DECODE_EDITS, "attention_decode.cuh")
    prep = edit((src / "prep_attention.cuh").read_text(), PREP_EDITS, "prep_attention.cuh")
    (out / "attention_decode_traced.cuh").write_text(decode)
    (out / "prep_attention_traced.cuh").write_text(prep)
    print(f"make_traced.py: {out}/attention_decode_traced.cuh, {out}/prep_attention_traced.cuh")


if __name__ == "__main__":
    main()
