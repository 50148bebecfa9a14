"""Compiles CUDA C++ kernels with NVRTC (from PyPI wheels) to PTX, without a GPU.

Usage: nvrtc_check.py NVRTC_ROOT ARCH SOURCES_FILE
SOURCES_FILE holds one or more translation units, each starting with
`#include <cuda_runtime.h>` (as CubeCL's CUDA compiler writes them); other lines before
the first unit are ignored. Prints one line per unit and exits 1 if any fails to compile.
"""
import ctypes
import sys

root, arch, path = sys.argv[1], sys.argv[2], sys.argv[3]
lib = ctypes.CDLL(f"{root}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
units, current = [], None
for line in open(path):
    if line.startswith("#include <cuda_runtime.h>"):
        current = []
        units.append(current)
    if current is not None and not line.startswith(("test ", "running ", "test result")):
        current.append(line)
if not units:
    sys.exit("no CUDA translation unit found in " + path)
failed = 0
for i, unit in enumerate(units):
    src = "".join(unit).rstrip().rstrip(".").encode()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernel.cu", 0, None, None) == 0
    opts = [
        f"--gpu-architecture={arch}".encode(),
        f"-I{root}/nvidia/cuda_runtime/include".encode(),
        f"-I{root}/nvidia/cuda_nvcc/include".encode(),
        b"--std=c++17",
        b"-diag-suppress=177",
    ]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    ptx_len = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(ptx_len))
    ptx = ctypes.create_string_buffer(ptx_len.value)
    lib.nvrtcGetPTX(prog, ptx)
    mma = ptx.value.decode(errors="replace").count("mma.sync")
    print(f"unit {i}: {'ok' if rc == 0 else 'FAILED'}, {ptx_len.value} bytes of PTX, {mma} mma instructions")
    if rc != 0:
        failed += 1
        log_len = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(log_len))
        log = ctypes.create_string_buffer(log_len.value)
        lib.nvrtcGetProgramLog(prog, log)
        print(log.value.decode(errors="replace"))
sys.exit(1 if failed else 0)
