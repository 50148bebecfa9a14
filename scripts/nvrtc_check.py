"""Compiles CUDA C++ kernels with NVRTC (from PyPI wheels) to PTX, without a GPU.

Usage: nvrtc_check.py NVRTC_ROOT UNITS_DIR ARCH [ARCH ...]
UNITS_DIR holds one translation unit per `.cu` file, as the test
`cuda_lowering::every_kernel_lowers_to_cuda` (brotensor-kernels) writes them: two comment
lines naming the kernel and its comptime values, then CubeCL's CUDA C++. Every unit is
compiled for the first ARCH (the oldest, e.g. compute_80: what compiles there uses nothing a
newer arch lacks), and the tensor-core units (`wmma::`, whose instructions and fragment shapes
depend on the arch) for every later ARCH too (e.g. compute_90), on all CPUs. The rest of the
source is the same for every arch, so compiling it again only repeats the work. Prints each failure with
NVRTC's log and one summary line per arch; exits 1 if any unit fails, if a tensor-core unit
has no mma instruction, or if UNITS_DIR holds no unit.
"""
import ctypes
import multiprocessing
import os
import sys

LIB = None
ROOT = None


def init(root):
    global LIB, ROOT
    ROOT = root
    LIB = ctypes.CDLL(f"{root}/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")


def compile_unit(job):
    """Compiles one file for one arch; returns (path, arch, error or None)."""
    path, arch = job
    src = open(path, "rb").read()
    prog = ctypes.c_void_p()
    if LIB.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernel.cu", 0, None, None) != 0:
        return path, arch, "nvrtcCreateProgram failed"
    opts = [
        f"--gpu-architecture={arch}".encode(),
        f"-I{ROOT}/nvidia/cuda_runtime/include".encode(),
        f"-I{ROOT}/nvidia/cuda_nvcc/include".encode(),
        b"--std=c++17",
        b"-diag-suppress=177",
    ]
    rc = LIB.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    error = None
    if rc != 0:
        size = ctypes.c_size_t()
        LIB.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        LIB.nvrtcGetProgramLog(prog, log)
        error = f"NVRTC error {rc}:\n" + log.value.decode(errors="replace")
    elif "gemm_cmma_kernel" in os.path.basename(path):
        size = ctypes.c_size_t()
        LIB.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        LIB.nvrtcGetPTX(prog, ptx)
        if b"mma.sync" not in ptx.value:
            error = "the tensor-core kernel's PTX has no mma instruction"
    LIB.nvrtcDestroyProgram(ctypes.byref(prog))
    return path, arch, error


def main():
    root, units_dir, archs = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not archs:
        sys.exit("usage: nvrtc_check.py NVRTC_ROOT UNITS_DIR ARCH [ARCH ...]")
    files = sorted(
        os.path.join(units_dir, f) for f in os.listdir(units_dir) if f.endswith(".cu")
    )
    if not files:
        sys.exit(f"nvrtc-check: no CUDA translation unit found in {units_dir}")
    def arch_sensitive(path):
        with open(path, "rb") as f:
            return b"wmma::" in f.read()

    later = [f for f in files if arch_sensitive(f)] if len(archs) > 1 else []
    jobs = [(f, archs[0]) for f in files] + [(f, a) for a in archs[1:] for f in later]
    counts = {archs[0]: len(files), **{a: len(later) for a in archs[1:]}}
    with multiprocessing.Pool(os.cpu_count(), initializer=init, initargs=(root,)) as pool:
        results = pool.map(compile_unit, jobs, chunksize=8)
    failed = {arch: 0 for arch in archs}
    for path, arch, error in results:
        if error is None:
            continue
        failed[arch] += 1
        with open(path) as f:
            header = "".join(next(f) for _ in range(2))
        print(f"FAILED ({arch}): {os.path.basename(path)}\n{header}{error}\n")
    for arch in archs:
        print(f"nvrtc-check {arch}: {counts[arch] - failed[arch]} units compiled, {failed[arch]} failed")
    sys.exit(1 if any(failed.values()) else 0)


if __name__ == "__main__":
    main()
