"""Draws docs/img/architecture.svg, the architecture figure of the README and the site.

Plain SVG text, no dependency: ``python docs/diagrams/architecture.py`` rewrites the file.
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "img" / "architecture.svg"

W, H = 960, 560
INK = "#1f2933"
MUTED = "#52606d"
ACTOR = "#e3f2fd"
ACTOR_EDGE = "#1565c0"
SLOT = "#fff8e1"
SLOT_EDGE = "#b26a00"
LEARN = "#e8f5e9"
LEARN_EDGE = "#2e7d32"
STORE = "#f3e5f5"
STORE_EDGE = "#6a1b9a"


def esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def rect(x, y, w, h, fill, stroke, rx=8, dash="", width=1.5) -> str:
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="{rx}" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{width}"{extra}/>'
    )


def text(x, y, s, size=14, anchor="start", weight="normal", fill=INK, style="") -> str:
    italic = ' font-style="italic"' if style == "italic" else ""
    return (
        f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" '
        f'font-weight="{weight}" fill="{fill}"{italic}>{esc(s)}</text>'
    )


def arrow(points, color=INK, label="", lx=0, ly=0, anchor="middle", dash="") -> str:
    path = " ".join(f"{'M' if i == 0 else 'L'} {x} {y}" for i, (x, y) in enumerate(points))
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    out = (
        f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"{extra} '
        f'marker-end="url(#head-{color[1:]})"/>'
    )
    if label:
        for i, line in enumerate(label.split("\n")):
            out += text(lx, ly + 16 * i, line, 13, anchor, fill=color)
    return out


def actor(x, y, n) -> list[str]:
    parts = [
        rect(x, y, 250, 150, ACTOR, ACTOR_EDGE),
        text(x + 12, y + 24, f"actor {n}", 15, weight="bold", fill=ACTOR_EDGE),
    ]
    for k in range(4):
        ex = x + 12 + k * 44
        parts.append(rect(ex, y + 40, 38, 30, "#ffffff", ACTOR_EDGE, rx=4, width=1))
        parts.append(text(ex + 19, y + 60, "env" if k < 3 else "...", 12, "middle"))
    parts.append(text(x + 196, y + 60, "K envs", 12, fill=MUTED))
    parts.append(text(x + 12, y + 88, "one batched env (Gymnasium or EnvPool)", 11, fill=MUTED))
    parts.append(rect(x + 12, y + 100, 226, 36, "#ffffff", STORE_EDGE, rx=4, width=1))
    parts.append(text(x + 125, y + 123, "CPU copy of the policy, version v", 12, "middle"))
    return parts


def slots(x, y) -> list[str]:
    parts = [
        rect(x, y, 200, 330, SLOT, SLOT_EDGE),
        text(x + 100, y + 24, "rollout slots", 15, "middle", "bold", SLOT_EDGE),
        text(x + 100, y + 42, "K x T samples each", 12, "middle", fill=MUTED),
    ]
    states = [
        ("free", "#ffffff"),
        ("filling", "#ffe0b2"),
        ("full", "#ffcc80"),
        ("training", "#c8e6c9"),
    ]
    for row in range(2):
        for col in range(2):
            name, fill = states[(row * 2 + col + row) % 4]
            sx, sy = x + 22 + col * 82, y + 62 + row * 120
            parts.append(rect(sx, sy, 74, 96, fill, SLOT_EDGE, rx=4, width=1))
            who = "actor 0" if row == 0 else "actor N-1"
            parts.append(text(sx + 37, sy + 20, who, 11, "middle", fill=MUTED))
            parts.append(text(sx + 37, sy + 54, name, 13, "middle"))
    parts.append(text(x + 100, y + 312, "shared memory (process),", 11, "middle", fill=MUTED))
    parts.append(text(x + 100, y + 326, "Ray objects (ray)", 11, "middle", fill=MUTED))
    return parts


def main() -> None:
    heads = "".join(
        f'<marker id="head-{c[1:]}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        f'fill="{c}"/></marker>'
        for c in (INK, SLOT_EDGE, LEARN_EDGE, STORE_EDGE)
    )
    body: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
        f'height="{H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" role="img" '
        f'aria-labelledby="title">',
        '<title id="title">asyncrl: N actors feed one learner through rollout slots; the '
        "learner publishes numbered policy versions that the actors read</title>",
        f"<defs>{heads}</defs>",
        rect(0, 0, W, H, "#ffffff", "#ffffff", rx=0),
        # the backend: where the actors live
        rect(16, 56, 290, 420, "none", MUTED, rx=12, dash="6 5"),
        text(30, 78, "backend: inline | thread | process | ray", 13, weight="bold", fill=MUTED),
        text(30, 96, "decides where the actors live", 12, fill=MUTED, style="italic"),
        *actor(36, 110, 0),
        text(161, 288, "... N actors (--actors)", 13, "middle", fill=MUTED),
        *actor(36, 310, "N-1"),
        *slots(380, 90),
        # the learner
        rect(660, 150, 280, 170, LEARN, LEARN_EDGE),
        text(800, 176, "learner (one per policy)", 15, "middle", "bold", LEARN_EDGE),
        text(676, 200, "algorithm: update(batch)", 13),
        text(676, 218, "PPO, SAC or DQN, a plug-in", 12, fill=MUTED),
        text(676, 242, "runtime hosts it: lag, counters,", 13),
        text(676, 260, "non-finite guard, versions", 13),
        text(676, 284, "lag of a sample = learner's", 12, fill=MUTED),
        text(676, 300, "version - the one that acted", 12, fill=MUTED),
        # the policy store
        rect(380, 468, 560, 72, STORE, STORE_EDGE),
        text(396, 494, "policy store", 15, weight="bold", fill=STORE_EDGE),
        text(396, 516, "numbered versions: ... v41, v42, v43 (newest)", 13),
        text(396, 533, "a seqlock: no reader or writer waits on a lock", 11, fill=MUTED),
        # data flow
        arrow([(286, 185), (378, 185)], SLOT_EDGE, "write a\nrollout", 332, 156),
        arrow([(286, 385), (378, 385)], SLOT_EDGE, "write a\nrollout", 332, 356),
        arrow([(580, 235), (658, 235)], LEARN_EDGE, "read a\nbatch", 619, 206),
        arrow(
            [(800, 320), (800, 466)],
            STORE_EDGE,
            "publish v+1\nafter each update",
            812,
            384,
            "start",
        ),
        arrow(
            [(378, 504), (161, 504), (161, 478)],
            STORE_EDGE,
            "read the newest version\nbefore each rollout",
            172,
            528,
            "start",
        ),
        # the one switch
        rect(330, 4, 610, 66, "#fafafa", INK, rx=8, width=1),
        text(346, 26, "--mode sync | async: the one switch", 14, weight="bold"),
        text(
            346,
            46,
            "sync: a batch is every actor's slot; actors wait while the learner trains (lag 0)",
            11,
        ),
        text(346, 61, "async: a batch is one actor's slot; actors go on collecting (lag > 0)", 11),
        "</svg>",
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(body) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
