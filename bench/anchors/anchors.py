"""Anchors measured on the device: copy bandwidth, torch linear and a torch MLP (eager and CUDA graph)."""
import torch
import torch.nn.functional as F


def timeit(fn, reps=200, warm=20):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        s.record()
        for _ in range(reps): fn()
        e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / reps)
    ts.sort(); return ts[len(ts) // 2] * 1e3  # us, median of 5

dev = torch.device("cuda")
print(torch.cuda.get_device_name(), "SMs", torch.cuda.get_device_properties(0).multi_processor_count)
x = torch.empty(2 * 1024**3 // 2, dtype=torch.bfloat16, device=dev); y = torch.empty_like(x)
us = timeit(lambda: y.copy_(x), reps=20, warm=3)
bw = 2 * x.numel() * 2 / (us * 1e-6) / 1e12
print(f"copy bandwidth: {bw:.2f} TB/s (read+write)")
del x, y
H, I = 4096, 12288
NW = 4  # rotate weight sets so the working set exceeds L2
Ws = [torch.randn(I, H, dtype=torch.bfloat16, device=dev) for _ in range(NW)]
for B in (1, 4, 16):
    xs = torch.randn(B, H, dtype=torch.bfloat16, device=dev)
    k = [0]
    def lin():
        k[0] = (k[0] + 1) % NW; F.linear(xs, Ws[k[0]])
    us = timeit(lin)
    print(f"torch linear B={B} W={I}x{H} bf16: {us:.1f} us, {I*H*2/(us*1e-6)/1e12:.2f} TB/s weight stream, {100*I*H*2/(us*1e-6)/1e12/bw:.0f}% of copy bw")
del Ws
# Qwen3-style dense MLP: rmsnorm -> gate/up -> silu*mul -> down + residual
sets = []
for _ in range(2):
    sets.append(dict(wn=torch.randn(H, dtype=torch.bfloat16, device=dev),
                     wgu=torch.randn(2 * I, H, dtype=torch.bfloat16, device=dev) * 0.02,
                     wd=torch.randn(H, I, dtype=torch.bfloat16, device=dev) * 0.02))
def mlp(x, r, p):
    xf = x.float(); xn = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * p["wn"]
    gu = F.linear(xn, p["wgu"]); g, u = gu.chunk(2, dim=-1)
    return F.linear(F.silu(g) * u, p["wd"]) + r
bytes_mlp = (3 * I * H) * 2
for B in (1, 8):
    x = torch.randn(B, H, dtype=torch.bfloat16, device=dev); r = torch.randn(B, H, dtype=torch.bfloat16, device=dev)
    k = [0]
    def eager():
        k[0] ^= 1; return mlp(x, r, sets[k[0]])
    us_e = timeit(eager)
    g = torch.cuda.CUDAGraph(); st = torch.cuda.Stream(); st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3): mlp(x, r, sets[0]); mlp(x, r, sets[1])
    torch.cuda.current_stream().wait_stream(st)
    with torch.cuda.graph(g):
        mlp(x, r, sets[0]); mlp(x, r, sets[1])
    us_g = timeit(g.replay) / 2
    print(f"torch MLP B={B} H={H} I={I}: eager {us_e:.1f} us, CUDA graph {us_g:.1f} us/MLP; floor {bytes_mlp/(bw*1e12)*1e6:.1f} us at copy bw; graph reaches {100*bytes_mlp/(us_g*1e-6)/1e12/bw:.0f}% of copy bw")
