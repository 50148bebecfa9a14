"""The peer figures for the GPU benchmarks, measured on the same card in the same kit run:
torch.matmul at 4096^3 in FP16 and BF16 (TFLOP/s) and a device-to-device copy of a
4096 x 4096 tensor (GB/s). Prints a markdown table; skips cleanly without CUDA or torch."""
import sys

try:
    import torch
except ImportError:
    print("torch_peer: torch not installed; no peer figures")
    sys.exit(0)

if not torch.cuda.is_available():
    print("torch_peer: no CUDA device; no peer figures")
    sys.exit(0)


def best_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


print(f"# torch peer on {torch.cuda.get_device_name(0)} (torch {torch.__version__})")
print()
print("| op | dtype | size | ms | rate |")
print("|---|---|---|---:|---:|")
n = 4096
for dtype in (torch.float16, torch.bfloat16):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = best_ms(lambda: torch.matmul(a, b))
    print(f"| torch.matmul | {str(dtype)[6:]} | {n}^3 | {ms:.3f} | {2 * n**3 / ms / 1e9:.1f} TFLOP/s |")
for dtype in (torch.float32, torch.float16):
    x = torch.randn(n, n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    ms = best_ms(lambda: y.copy_(x))
    print(f"| copy_ d2d | {str(dtype)[6:]} | {n}^2 | {ms:.4f} | {2 * x.numel() * x.element_size() / ms / 1e6:.1f} GB/s |")
