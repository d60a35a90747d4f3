"""The tutorials' static diagrams, drawn once as SVG in English and Chinese.

``python docs/draw_figures.py`` writes ``notebooks/figures/*.svg`` and ``notebooks/zh/figures/*.svg``;
``tests/test_notebooks.py`` checks that the committed files are what this script draws. Plain SVG
with no external reference (users may be offline); the figures that show an algorithm compute it
(the ring allreduce's chunks, Split's new ranks) rather than draw it by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "notebooks"
FONT = "'Noto Sans CJK SC', 'Noto Sans', 'DejaVu Sans', sans-serif"
INK, MUTED, BLUE, ORANGE, GREEN, RED = "#222", "#666", "#4e79a7", "#f28e2b", "#59a14f", "#e15759"

WORDS = {
    "en": {
        "eager": "eager (small message)", "rendezvous": "rendezvous (large message)", "sender": "sender",
        "receiver": "receiver", "data": "data", "buffered": "kept in the receiver's buffer",
        "send_returns": "Send returns", "recv_posted": "Recv posted", "copied": "copied out: Recv returns",
        "rts": "request to send", "cts": "clear to send", "waits": "Send waits",
        "ring_title": "ring allreduce of 4 chunks on 4 ranks: shade = how many ranks' values a chunk holds",
        "start": "start", "rs": "reduce-scatter step {step}", "ag": "allgather step {step}", "rank": "rank",
        "split_title": "comm.Split(color, key): same color, same new communicator; key orders it (ties: old rank)",
        "old": "world rank", "color": "color", "key": "key", "new_comm": "new communicator of color",
        "new_rank": "new rank",
        "zero_title": "what each of 4 ranks keeps between steps (filled: kept)",
        "params": "parameters", "grads": "gradients", "optim": "Adam m, v",
        "dp": "data parallel",
    },
    "zh": {
        "eager": "eager 协议（小消息）", "rendezvous": "rendezvous 协议（大消息）", "sender": "发送方",
        "receiver": "接收方", "data": "数据", "buffered": "存进接收方的缓冲区",
        "send_returns": "Send 返回", "recv_posted": "发起 Recv", "copied": "从缓冲区复制出来：Recv 返回",
        "rts": "请求发送", "cts": "允许发送", "waits": "Send 等待",
        "ring_title": "4 个 rank 上 4 块数据的环形全归约：颜色越深，一块中已加入的 rank 越多",
        "start": "开始", "rs": "归约散发第 {step} 步", "ag": "全收集第 {step} 步", "rank": "rank",
        "split_title": "comm.Split(color, key)：color 相同的进入同一个新通信域；key 决定顺序（相同时按原进程号）",
        "old": "全局 rank", "color": "color", "key": "key", "new_comm": "新通信域，color",
        "new_rank": "新进程号",
        "zero_title": "4 个 rank 中每个在两步之间保存的内容（实心：保存）",
        "params": "参数", "grads": "梯度", "optim": "Adam 的 m、v",
        "dp": "数据并行",
    },
}


def svg(width: int, height: int, body: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="{FONT}" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        "<defs><marker id=\"head\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
        "orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#222\"/></marker></defs>",
        *body, "</svg>", ""])


def text(x: float, y: float, words: str, size: int = 12, anchor: str = "start", fill: str = INK,
         weight: str = "normal") -> str:
    words = words.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}">{words}</text>')


def arrow(x1: float, y1: float, x2: float, y2: float, colour: str = INK, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" stroke-width="1.6"'
            f'{dash} marker-end="url(#head)"/>')


def eager_rendezvous(w: dict[str, str]) -> str:
    body = []
    for left, title in ((40, w["eager"]), (540, w["rendezvous"])):
        body.append(text(left, 24, title, 14, weight="bold"))
        for x, who in ((left + 100, w["sender"]), (left + 290, w["receiver"])):
            body.append(text(x, 48, who, 12, "middle", MUTED))
            body.append(f'<line x1="{x}" y1="56" x2="{x}" y2="290" stroke="{MUTED}" stroke-width="2"/>')
    s, r = 140, 330  # eager
    body += [arrow(s, 80, r, 120, BLUE), text((s + r) / 2, 92, w["data"], 11, "middle", BLUE),
             f'<rect x="{r - 8}" y="118" width="16" height="60" fill="{ORANGE}" opacity="0.5"/>',
             text(r + 14, 150, w["buffered"], 11), text(s - 8, 84, w["send_returns"], 11, "end", GREEN),
             text(r + 14, 190, w["recv_posted"], 11), text(r + 14, 206, w["copied"], 11, fill=GREEN)]
    s, r = 640, 830  # rendezvous
    body += [arrow(s, 80, r, 110), text((s + r) / 2, 86, w["rts"], 11, "middle"),
             text(r + 12, 184, w["recv_posted"], 11), arrow(r, 180, s, 210),
             text((s + r) / 2, 186, w["cts"], 11, "middle"),
             arrow(s, 215, r, 255, BLUE), text((s + r) / 2, 228, w["data"], 11, "middle", BLUE),
             f'<rect x="{s - 5}" y="80" width="10" height="175" fill="{RED}" opacity="0.35"/>',
             text(s - 12, 170, w["waits"], 11, "end", RED), text(s - 12, 262, w["send_returns"], 11, "end", GREEN)]
    return svg(960, 300, body)


def ring_allreduce(w: dict[str, str], p: int = 4) -> str:
    """Every step of a ring allreduce, computed: which ranks' values each chunk of each rank holds."""
    held = [[{r} for _ in range(p)] for r in range(p)]
    states, labels = [[[len(c) for c in row] for row in held]], [w["start"]]
    # reduce-scatter: in step s rank r sends chunk (r - s) to r + 1, which adds it; allgather: rank r
    # passes its complete chunk (r + 1 - s) on, which replaces the receiver's
    for phase, first, adds in (("rs", 0, True), ("ag", 1, False)):
        for step in range(p - 1):
            sent = [(r, (r + first - step) % p) for r in range(p)]
            arriving = [set(held[r][chunk]) for r, chunk in sent]
            for (r, chunk), values in zip(sent, arriving):
                held[(r + 1) % p][chunk] = held[(r + 1) % p][chunk] | values if adds else values
            states.append([[len(c) for c in row] for row in held])
            labels.append(w[phase].format(step=step + 1))
    assert all(len(c) == p for row in held for c in row), "every chunk summed over every rank"
    shades = {1: "#e8eef6", 2: "#b7c9e2", 3: "#7f9fc9", 4: BLUE}
    cell, gap, panel = 16, 4, p * 16 + 40
    body = [text(20, 22, w["ring_title"], 13, weight="bold")]
    for k, (state, label) in enumerate(zip(states, labels)):
        x0 = 70 + k * (panel + 14)
        body.append(text(x0 + p * cell / 2, 50, label, 10, "middle", MUTED))
        for r in range(p):
            y = 62 + r * (cell + gap)
            if k == 0:
                body.append(text(60, y + 12, f"{w['rank']} {r}", 11, "end"))
            for c in range(p):
                count = state[r][c]
                body.append(f'<rect x="{x0 + c * cell}" y="{y}" width="{cell - 2}" height="{cell}" '
                            f'fill="{shades[count]}" stroke="#999" stroke-width="0.5"/>')
    return svg(70 + len(states) * (panel + 14), 62 + p * (cell + gap) + 16, body)


def split(w: dict[str, str]) -> str:
    colors, keys = [0, 1, 0, 1, 1, 0], [2, 0, 1, 1, 0, 0]
    fills = [BLUE, ORANGE]
    body = [text(20, 22, w["split_title"], 13, weight="bold")]
    for r in range(6):
        x = 60 + r * 100
        body += [f'<rect x="{x}" y="40" width="80" height="64" rx="6" fill="{fills[colors[r]]}" opacity="0.85"/>',
                 text(x + 40, 58, f"{w['old']} {r}", 11, "middle", "white", "bold"),
                 text(x + 40, 76, f"{w['color']} = {colors[r]}", 11, "middle", "white"),
                 text(x + 40, 94, f"{w['key']} = {keys[r]}", 11, "middle", "white")]
    for color in (0, 1):
        members = sorted((r for r in range(6) if colors[r] == color), key=lambda r: (keys[r], r))
        y = 150 + color * 90
        body.append(text(60, y - 10, f"{w['new_comm']} {color}", 12, weight="bold"))
        for new, old in enumerate(members):
            x = 60 + new * 130
            body += [f'<rect x="{x}" y="{y}" width="110" height="44" rx="6" fill="white" stroke="{fills[color]}" '
                     'stroke-width="2"/>',
                     text(x + 55, y + 18, f"{w['new_rank']} {new}", 11, "middle", weight="bold"),
                     text(x + 55, y + 35, f"({w['old']} {old})", 10, "middle", MUTED)]
    return svg(680, 300, body)


def zero_partitions(w: dict[str, str], p: int = 4) -> str:
    stages = [(w["dp"], (True, True, True)), ("ZeRO-1", (True, True, False)), ("ZeRO-2", (True, False, False)),
              ("ZeRO-3", (False, False, False))]
    parts = [(w["params"], BLUE), (w["grads"], ORANGE), (w["optim"], GREEN)]
    body = [text(20, 22, w["zero_title"], 13, weight="bold")]
    for s, (name, whole) in enumerate(stages):
        x0 = 20 + s * 190
        body.append(text(x0 + 80, 48, name, 12, "middle", weight="bold"))
        for r in range(p):
            y = 60 + r * 58
            body.append(text(x0, y + 12, f"{w['rank']} {r}", 10, fill=MUTED))
            for k, ((_, colour), full) in enumerate(zip(parts, whole)):
                top = y + 16 + k * 12
                for c in range(p):
                    kept = full or c == r
                    body.append(f'<rect x="{x0 + c * 40}" y="{top}" width="38" height="10" fill="{colour}" '
                                f'fill-opacity="{0.9 if kept else 0.08}" stroke="{colour}" stroke-width="0.6"/>')
    for k, (label, colour) in enumerate(parts):
        x = 20 + k * 170
        body += [f'<rect x="{x}" y="300" width="14" height="10" fill="{colour}"/>', text(x + 20, 309, label, 11)]
    return svg(790, 322, body)


FIGURES = {"eager-rendezvous.svg": eager_rendezvous, "ring-allreduce.svg": ring_allreduce, "split.svg": split,
           "zero-partitions.svg": zero_partitions}


def drawn() -> dict[Path, str]:
    """Every figure in both languages: path -> SVG text."""
    return {ROOT / folder / "figures" / name: draw(WORDS[language])
            for language, folder in (("en", ""), ("zh", "zh")) for name, draw in FIGURES.items()}


if __name__ == "__main__":
    for path, content in drawn().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        print(path.relative_to(ROOT.parent), file=sys.stderr)
