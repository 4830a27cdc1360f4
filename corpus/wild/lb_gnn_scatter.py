"""Relational GCN (R-GCN) node classifier on a small knowledge graph, message passing by hand.

# H200 estimate: 5k nodes, 16 relation types of 8k edges, hidden 128, 3 layers. Per layer and
# relation the Python loop runs index_select, a per-relation Linear, a norm multiply and
# index_add_: ~4 forward + ~7 backward kernels of ~2-8 us on 8k x 128 rows -> ~600 kernels,
# GPU ~3 ms/step; the host spends ~10-15 us on each (Python, autograd, dispatch, launch; the
# H100 measured ~15 us a kernel on lb_tiny_layers) -> none ~7-9 ms/step, the GPU mostly idle.
# --fix graphs (the host's dispatch removed entirely, same kernels: the whole step, forward,
# backward and capturable Adam, captured once as a CUDA graph and replayed; per step only the
# next batch of labelled nodes is copied into the graph's buffers) -> ~3 ms -> ~2.5x.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RGCNLayer(nn.Module):
    def __init__(self, dim, num_rels):
        super().__init__()
        self.rel = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(num_rels))
        self.root = nn.Linear(dim, dim)

    def forward(self, h, edges):
        out = self.root(h)
        for r, (src, dst, norm) in enumerate(edges):
            msg = self.rel[r](h.index_select(0, src)) * norm
            out.index_add_(0, dst, msg)
        return out


class RGCN(nn.Module):
    def __init__(self, num_nodes, dim, num_rels, num_classes, layers=3):
        super().__init__()
        self.emb = nn.Parameter(torch.randn(num_nodes, dim) * 0.1)  # featureless nodes
        self.layers = nn.ModuleList(RGCNLayer(dim, num_rels) for _ in range(layers))
        self.cls = nn.Linear(dim, num_classes)

    def forward(self, edges):
        h = self.emb
        for layer in self.layers:
            h = F.relu(layer(h, edges))
        return self.cls(h)


def make_graph(num_nodes, num_rels, edges_per_rel, device):
    """Random typed edges; each message is scaled by 1 / in-degree of its target per relation."""
    g = torch.Generator().manual_seed(0)
    edges = []
    for _ in range(num_rels):
        src = torch.randint(0, num_nodes, (edges_per_rel,), generator=g)
        dst = torch.randint(0, num_nodes, (edges_per_rel,), generator=g)
        deg = torch.bincount(dst, minlength=num_nodes).clamp(min=1).float()
        norm = (1.0 / deg[dst]).unsqueeze(1)
        edges.append((src.to(device), dst.to(device), norm.to(device)))
    return edges


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fix", default="none", choices=["none", "graphs"])
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    cuda = device.type == "cuda"
    if args.fix == "graphs" and not cuda:
        print(
            "RESULT "
            + json.dumps({"step_ms": None, "steps": 0, "fix": args.fix, "skipped": "needs CUDA"})
        )
        return
    torch.manual_seed(0)
    num_rels, classes = 16, 8
    nodes, per_rel, dim, batch = (5_000, 8_000, 128, 1024) if cuda else (300, 200, 16, 64)

    edges = make_graph(nodes, num_rels, per_rel, device)
    model = RGCN(nodes, dim, num_rels, classes).to(device)
    opt = torch.optim.Adam(
        model.parameters(), lr=1e-2, weight_decay=5e-4, capturable=args.fix == "graphs"
    )
    # mini-batches of labelled nodes: the graph is full-batch, the loss is on a sample
    data = [
        (
            torch.randint(0, nodes, (batch,), device=device),
            torch.randint(0, classes, (batch,), device=device),
        )
        for _ in range(8)
    ]
    state = {"i": 0}

    def train_step(idx, y):
        opt.zero_grad(set_to_none=True)
        logits = model(edges)
        loss = F.cross_entropy(logits.index_select(0, idx), y)
        loss.backward()
        opt.step()
        return loss

    if args.fix == "graphs":
        static_idx, static_y = data[0][0].clone(), data[0][1].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                train_step(static_idx, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            logits = model(edges)
            static_loss = F.cross_entropy(logits.index_select(0, static_idx), static_y)
            static_loss.backward()
            opt.step()

        def step():
            idx, y = data[state["i"] % len(data)]
            state["i"] += 1
            static_idx.copy_(idx)
            static_y.copy_(y)
            graph.replay()
    else:

        def step():
            idx, y = data[state["i"] % len(data)]
            state["i"] += 1
            train_step(idx, y)

    for _ in range(5):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 0
    while n < 10 or time.perf_counter() - t0 < args.seconds:
        step()
        n += 1
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / n
    print("RESULT " + json.dumps({"step_ms": round(ms, 3), "steps": n, "fix": args.fix}))


if __name__ == "__main__":
    main()
