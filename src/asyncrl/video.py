"""Videos of evaluated episodes: frames streamed into an animated GIF.

Why GIF, written with Pillow: Pillow is installed already (matplotlib needs it), a GIF plays in
every browser, on GitHub and in notebooks, and nothing else is needed -- MP4 would need an ffmpeg
binary (imageio-ffmpeg, ~30 MB), which asyncrl has no other use for. Pillow's own animated-GIF
writer keeps every frame in memory until it writes the file (10 episodes of CartPole are 5,000
frames of 600 x 400, ~1.2 GB) and merges identical consecutive frames; this writer instead
quantises each frame to its own 256-colour palette and appends it to the file at once, with
Pillow's documented frame encoder (``GifImagePlugin.getheader`` / ``getdata``): memory stays at
one frame, and the file holds exactly the frames given.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


class GifWriter:
    """An animated GIF written frame by frame: ``add`` RGB frames (H x W x 3 uint8), then
    ``close``. The file appears under its name only when closed (a temporary file is renamed),
    so a failed recording leaves no half-written video; ``abort`` removes it."""

    def __init__(self, path: str | Path, fps: float):
        self.path = Path(path)
        # GIF delays are in hundredths of a second, and players treat less than 2 as 10
        self.duration_ms = max(20, int(round(100 / max(fps, 1e-9))) * 10)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        self.file = None
        self.frames = 0
        self.size: tuple[int, int] | None = None

    def add(self, frame: np.ndarray) -> None:
        """Append one RGB frame (the first sets the canvas size; later ones are fitted to it)."""
        from PIL import GifImagePlugin, Image

        image = Image.fromarray(np.ascontiguousarray(frame[..., :3]), "RGB")
        if self.size is None:
            self.size = image.size
        elif image.size != self.size:  # a GIF has one canvas size
            image = image.resize(self.size)
        indexed = image.quantize(256, method=Image.Quantize.FASTOCTREE)
        if self.file is None:
            self.file = open(self.tmp, "wb")  # closed by close() or abort()
            header, _ = GifImagePlugin.getheader(
                indexed, None, {"loop": 0, "duration": self.duration_ms}
            )
            self.file.write(b"".join(header))
        for chunk in GifImagePlugin.getdata(
            indexed, duration=self.duration_ms, include_color_table=True
        ):
            self.file.write(chunk)
        self.frames += 1

    def close(self) -> Path:
        """Finish the file and move it to its name; returns the path."""
        if self.file is None:
            raise ValueError(f"video: no frame was recorded for {self.path}")
        self.file.write(b";")  # the GIF trailer
        self.file.close()
        self.file = None
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Give up the recording: close and remove the temporary file; the path is untouched."""
        if self.file is not None:
            self.file.close()
            self.file = None
        self.tmp.unlink(missing_ok=True)
