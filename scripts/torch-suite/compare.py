"""Compares the tensors two suite.py runs saved: compare.py A_DIR B_DIR
Prints one JSON object: {"same": [names], "differ": {name: max_abs_diff},
"missing": [names in one run only]}. Same means the same dtype, shape and
values (suite.py saves floats as fp32, exact for bf16/fp16; NaNs at the same
places compare equal)."""
import json
import os
import sys

import torch

a = torch.load(os.path.join(sys.argv[1], "tensors.pt"))
b = torch.load(os.path.join(sys.argv[2], "tensors.pt"))
out = {"same": [], "differ": {}, "missing": sorted(set(a) ^ set(b))}
for name in sorted(set(a) & set(b)):
    x, y = a[name], b[name]
    if x.dtype == y.dtype and x.shape == y.shape and (torch.equal(x, y) or (
            x.is_floating_point() and torch.equal(x.isnan(), y.isnan()) and torch.equal(x.nan_to_num(), y.nan_to_num()))):
        out["same"].append(name)
    elif x.shape != y.shape:
        out["differ"][name] = "shape %s vs %s" % (tuple(x.shape), tuple(y.shape))
    else:
        out["differ"][name] = float((x.double() - y.double()).abs().nan_to_num(float("inf")).max())
print(json.dumps(out))
