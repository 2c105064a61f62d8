#!/usr/bin/env python3
"""Used by build_peers.sh on the unpacked sdists of mamba-ssm and causal-conv1d: their
setup.py appends '-gencode arch=compute_XX,code=sm_XX' for nine architectures; this replaces
every such append but sm_90's with `pass`, so the peers build for the H100/H200 alone."""
import re
import sys

PAIR = r'cc_flag\.append\("-gencode"\)\n\s*cc_flag\.append\("arch=compute_(\d+),code=sm_\d+"\)'

for path in sys.argv[1:]:
    with open(path) as f:
        text = f.read()
    text, count = re.subn(PAIR, lambda m: m.group(0) if m.group(1) == "90" else "pass", text)
    compile(text, path, "exec")  # still valid Python
    with open(path, "w") as f:
        f.write(text)
    print(f"{path}: kept sm_90 of {count} -gencode appends")
