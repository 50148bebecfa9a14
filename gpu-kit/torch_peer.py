"""The peer figures for the GPU benchmarks, measured on the same card in the same kit run:
torch.matmul at 4096^3 in FP16 and BF16 (TFLOP/s), a device-to-device copy of a 4096 x 4096
tensor (GB/s), and `scaled_dot_product_attention` at the shapes of `bench_attention` (forward
B=1, H=16, L=1024/4096, hd=64/128, causal and not, in TFLOP/s; decode with 32 query / 8 KV
heads, hd 128, one query against caches of 512/4096/16384 rows, in GB/s of K/V read), and the
tensor-algebra ops `bench_ops` times (F32 4096 x 4096: transpose made contiguous, sum over
axis 0 and 1, amax over axis 1, a shuffled row gather, a concatenation of four row blocks; GB/s
of the bytes each must read and write once, as `bench_ops` counts them), and cuDNN's
convolutions at the shapes of `bench_conv` in F32/F16/BF16 (TFLOP/s), torch's image-space ops
at the tensor of `bench_image` (GB/s), and the diffusion residual block of `bench_diffusion` as
torch's unfused chain (TFLOP/s), `torch.optim.Adam` on 16 Mi parameters (GB/s of 28 bytes per
parameter) and the digits CNN of `bench_train` trained in eager mode at batch 64 (steps/s).
Prints a markdown
table; skips cleanly without CUDA or torch."""
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

x = torch.randn(n, n, device="cuda", dtype=torch.float32)
order = (torch.arange(n, device="cuda") * 1031) % n
blocks = [b.contiguous() for b in x.split(n // 4, 0)]
tensor_bytes = x.numel() * 4
for name, fn, tensors in (
    ("transpose [1, 0] (.t().contiguous())", lambda: x.t().contiguous(), 2),
    ("reduce_sum axis 0 (sum(0))", lambda: x.sum(0), 1),
    ("reduce_sum axis 1 (sum(1))", lambda: x.sum(1), 1),
    ("reduce_max axis 1 (amax(1))", lambda: x.amax(1), 1),
    ("gather rows, shuffled (index_select)", lambda: x.index_select(0, order), 2),
    ("concatenate 4 blocks, axis 0 (cat)", lambda: torch.cat(blocks, 0), 2),
):
    ms = best_ms(fn)
    print(f"| {name} | float32 | {n}^2 | {ms:.4f} | {tensors * tensor_bytes / ms / 1e6:.1f} GB/s |")

import torch.nn.functional as F

for dtype in (torch.float16, torch.bfloat16):
    for hd in (64, 128):
        for seq in (1024, 4096):
            for causal in (False, True):
                q, k, v = (torch.randn(1, 16, seq, hd, device="cuda", dtype=dtype) for _ in range(3))
                ms = best_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), reps=10)
                flop = 4 * 16 * seq * seq * hd * (0.5 if causal else 1.0)
                tag = "causal" if causal else "full"
                print(f"| sdpa forward {tag} | {str(dtype)[6:]} | H16 L{seq} hd{hd} | {ms:.3f} | {flop / ms / 1e9:.1f} TFLOP/s |")
    for cache in (512, 4096, 16384):
        q = torch.randn(1, 32, 1, 128, device="cuda", dtype=dtype)
        k, v = (torch.randn(1, 8, cache, 128, device="cuda", dtype=dtype) for _ in range(2))
        try:
            ms = best_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        except TypeError:  # torch < 2.5 has no enable_gqa: repeat the KV heads (reads 4x)
            kr, vr = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
            ms = best_ms(lambda: F.scaled_dot_product_attention(q, kr, vr))
        kv_bytes = 2 * k.numel() * k.element_size()
        print(f"| sdpa decode 32q/8kv | {str(dtype)[6:]} | cache {cache} hd128 | {ms:.4f} | {kv_bytes / ms / 1e6:.1f} GB/s |")

# The convolution shapes of `bench_conv` (issue 25), cuDNN through F.conv2d /
# F.conv_transpose2d, in TFLOP/s (the multiply-adds times two, as bench_conv counts them).
CONV_SHAPES = (
    # name, transposed, n, c_in, h, w, c_out, k, stride, pad, groups
    ("3x3 320->320, 64x64, b1", False, 1, 320, 64, 64, 320, 3, 1, 1, 1),
    ("1x1 640->320, 64x64, b1", False, 1, 640, 64, 64, 320, 1, 1, 0, 1),
    ("7x7 s2 3->64, 224x224, b8", False, 8, 3, 224, 224, 64, 7, 2, 3, 1),
    ("3x3 64->64, 56x56, b8", False, 8, 64, 56, 56, 64, 3, 1, 1, 1),
    ("depthwise 3x3 C=256, 56x56, b8", False, 8, 256, 56, 56, 256, 3, 1, 1, 256),
    ("transposed 4x4 s2 256->128, 16->32, b8", True, 8, 256, 16, 16, 128, 4, 2, 1, 1),
)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for name, transposed, n, c_in, h, w, c_out, k, stride, pad, groups in CONV_SHAPES:
        x = torch.randn(n, c_in, h, w, device="cuda", dtype=dtype)
        if transposed:
            wt = torch.randn(c_in, c_out // groups, k, k, device="cuda", dtype=dtype)
            ms = best_ms(lambda: F.conv_transpose2d(x, wt, stride=stride, padding=pad, groups=groups))
            flop = 2 * n * c_in * h * w * (c_out // groups) * k * k
        else:
            wt = torch.randn(c_out, c_in // groups, k, k, device="cuda", dtype=dtype)
            ms = best_ms(lambda: F.conv2d(x, wt, stride=stride, padding=pad, groups=groups))
            ho = (h + 2 * pad - k) // stride + 1
            wo = (w + 2 * pad - k) // stride + 1
            flop = 2 * n * c_out * ho * wo * (c_in // groups) * k * k
        print(f"| F.conv2d {name} | {str(dtype)[6:]} | cuDNN | {ms:.3f} | {flop / ms / 1e9:.2f} TFLOP/s |")

# The image-space ops of `bench_image` (issue 26) on 8 x 64 x 512 x 512, in GB/s of the bytes
# each must read and write once (counted as bench_image counts them), and the device copy.
n, c, h, w = 8, 64, 512, 512
for dtype in (torch.float32, torch.float16):
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    up = torch.randn(n, c, 2 * h, 2 * w, device="cuda", dtype=dtype)
    es, numel = x.element_size(), x.numel()
    padded = n * c * (h * w + (h + 2) * (w + 2)) * es
    rows = (
        ("copy", lambda: x.clone(), 2 * numel * es),
        ("upsample_nearest_2x", lambda: F.interpolate(x, scale_factor=2, mode="nearest"), 5 * numel * es),
        ("upsample_bilinear_2x", lambda: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), 5 * numel * es),
        ("upsample_nearest_2x_backward", lambda: F.avg_pool2d(up, 2, divisor_override=1), 5 * numel * es),
        ("max_pool2d 2x2 s2 (+ indices)", lambda: F.max_pool2d(x, 2, return_indices=True), numel * es * 6 // 4),
        ("downsample_avg_2x", lambda: F.avg_pool2d(x, 2), numel * es * 5 // 4),
        ("adaptive_avg_pool2d to 7x7", lambda: F.adaptive_avg_pool2d(x, 7), numel * es),
        ("pad2d zero 1 px", lambda: F.pad(x, (1, 1, 1, 1)), padded),
        ("pad2d replicate 1 px", lambda: F.pad(x, (1, 1, 1, 1), mode="replicate"), padded),
        ("pad2d reflect 1 px", lambda: F.pad(x, (1, 1, 1, 1), mode="reflect"), padded),
        ("pixel_shuffle(2)", lambda: F.pixel_shuffle(x, 2), 2 * numel * es),
        ("nchw_to_sequence", lambda: x.flatten(2).transpose(1, 2).contiguous(), 2 * numel * es),
    )
    for name, fn, nbytes in rows:
        ms = best_ms(fn, reps=5)
        print(f"| {name} 8x64x512x512 | {str(dtype)[6:]} | torch | {ms:.3f} | {nbytes / ms / 1e6:.1f} GB/s |")

# The residual block of `bench_diffusion` (issue 28): torch's unfused chain (GroupNorm, SiLU,
# cuDNN conv2d, adds) at SD U-Net sizes, in TFLOP/s of the two 3x3 convolutions.
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for n, c, h, w in ((1, 320, 64, 64), (1, 640, 32, 32)):
        x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
        g, b = torch.ones(c, device="cuda", dtype=dtype), torch.zeros(c, device="cuda", dtype=dtype)
        w1, w2 = (torch.randn(c, c, 3, 3, device="cuda", dtype=dtype) * 0.02 for _ in range(2))
        b1, b2 = (torch.zeros(c, device="cuda", dtype=dtype) for _ in range(2))
        t = torch.randn(n, c, 1, 1, device="cuda", dtype=dtype)

        def block():
            hh = F.silu(F.group_norm(x, 32, g, b, 1e-5))
            hh = F.conv2d(hh, w1, b1, padding=1) + t
            hh = F.silu(F.group_norm(hh, 32, g, b, 1e-5))
            return F.conv2d(hh, w2, b2, padding=1) + x

        ms = best_ms(block)
        flop = 2 * 2 * n * c * c * 9 * h * w
        print(f"| resblock chain {n}x{c}x{h}x{w} | {str(dtype)[6:]} | torch (cuDNN) | {ms:.3f} | {flop / ms / 1e9:.2f} TFLOP/s |")


# Training (issue 29): Adam on 16 Mi parameters (the fused CUDA step and the foreach one), and
# the digits CNN of `bench_train` (conv 16 / pool / conv 32 / pool / linear 10, batch 64,
# cross-entropy, Adam lr 3e-3) trained in eager mode on random 8x8 images.
n = 16 << 20
for label, kwargs in (("fused", {"fused": True}), ("foreach", {"foreach": True})):
    p = torch.nn.Parameter(torch.ones(n, device="cuda"))
    p.grad = torch.full((n,), 0.01, device="cuda")
    opt = torch.optim.Adam([p], lr=1e-3, **kwargs)
    ms = best_ms(opt.step, reps=10)
    print(f"| torch.optim.Adam ({label}) | float32 | 16 Mi params | {ms:.3f} | {28 * n / ms / 1e6:.1f} GB/s |")

net = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(128, 10),
).cuda()
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
xs = torch.rand(23, 64, 1, 8, 8, device="cuda")
ys = torch.randint(0, 10, (23, 64), device="cuda")


def epoch():
    for k in range(23):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(xs[k]), ys[k])
        loss.backward()
        opt.step()
        loss.item()  # the loss read back each step, as train_digits does


ms = best_ms(epoch, reps=1)
print(f"| digits CNN training step, batch 64 | float32 | torch eager | {ms / 23:.3f} | {23_000 / ms:.1f} steps/s |")
