"""Write ``descriptors.binpb``: the vendored TF OD API protos compiled to one
``FileDescriptorSet`` (imports included), with protoc from ``grpcio-tools``.

    python -m pip install grpcio-tools
    python src/jaxdet/config/tfod_protos/compile_descriptors.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    try:
        from grpc_tools import protoc
    except ImportError:
        print("compile_descriptors: needs grpcio-tools (python -m pip install grpcio-tools)",
              file=sys.stderr)
        return 2
    protos = sorted(str(p.relative_to(HERE)) for p in (HERE / "object_detection").rglob("*.proto"))
    code = protoc.main(["protoc", f"-I{HERE}", f"--descriptor_set_out={HERE / 'descriptors.binpb'}",
                        "--include_imports", *protos])
    if code == 0:
        print(f"wrote {HERE / 'descriptors.binpb'} ({len(protos)} files)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
