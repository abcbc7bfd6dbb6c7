"""image/clampimage.py's ``clamp_image`` on the real engine (issue 45): a small image of three
RUN steps on the Debian + Python base (one writes a fake installed distribution the way uv does:
a RECORD and a ``uv_cache.json`` holding the install's time), clamped as builder/tail.py's
``clamp_candidate`` does (the base's creation the floor, its layers kept, a clamp cache in the
test's folder). What it shows, each against the engine's own answer:

- the first clamp reads past the base's layers and clamps the three RUN layers;
- the same build again from BuildKit's cache is the same unclamped image: tagged from the clamp
  cache, ``docker save`` not run;
- a build with every step rerun (new times everywhere), clamped to digests first as
  ``--check-reproducible``'s rerun is, is the same image with nothing written or sent (the
  engine holds every clamped layer), and its layers are remembered for the next build;
- a build whose top step's argument changed reads past every layer below it and clamps only
  that one: the same diff ids but the last;
- in the clamped image RECORD agrees with ``uv_cache.json`` (sha256, size), the files of the
  build have the floor's time, the .pyc records its source's clamped time;
- the clamp cache naming an image the engine no longer holds: the stream again, the same image;
  where another image holds every layer of it (a relabel), made again from its remembered config
  alone, with no ``docker save``.

Every image it makes (only those) is removed; its files are removed.
"""

from __future__ import annotations

import json
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.images import in_image

pytestmark = pytest.mark.e2e
REPO = "edgevllm-test/e2e-clamp-image"

# Written by the middle RUN step: a distribution installed into /sp as uv installs one, with
# uv's install record holding the time of the install (seconds and nanoseconds), a RECORD
# listing it by sha256 and size, and a timestamp-based .pyc of its module.
INSTALL = """
import base64, hashlib, os, py_compile, time
folder = "/sp/x-1.dist-info"
os.makedirs(folder)
now = time.time_ns()
files = {
    "x.py": b"VALUE = 1\\n",
    "x-1.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: x\\nVersion: 1\\n",
    "x-1.dist-info/uv_cache.json": b'{"timestamp":{"secs_since_epoch":%d,"nanos_since_epoch":%d}}'
        % (now // 10**9, now % 10**9),
}
lines = []
for name, data in files.items():
    with open("/sp/" + name, "wb") as out:
        out.write(data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines.append(f"{name},sha256={digest},{len(data)}")
lines.append("x-1.dist-info/RECORD,,")
with open(folder + "/RECORD", "w") as out:
    out.write("\\n".join(sorted(lines)) + "\\n")
py_compile.compile("/sp/x.py", invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
"""

# Run in the clamped image: RECORD's line for uv_cache.json against the file itself, and the
# times the build's files have (the .pyc's recorded source time too).
CHECK = """
import base64, glob, hashlib, json, os
data = open("/sp/x-1.dist-info/uv_cache.json", "rb").read()
line = [one for one in open("/sp/x-1.dist-info/RECORD").read().splitlines()
        if one.startswith("x-1.dist-info/uv_cache.json,")]
digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
pyc = open(glob.glob("/sp/__pycache__/x.*.pyc")[0], "rb").read()
paths = ["/clamp-nonce.txt", "/clamp-top.txt", "/sp", "/sp/x.py", "/sp/x-1.dist-info/RECORD",
         "/sp/x-1.dist-info/uv_cache.json", "/sp/__pycache__"]
print(json.dumps({
    "uv": json.loads(data), "line": line, "expected": f"x-1.dist-info/uv_cache.json,sha256="
    f"{digest},{len(data)}", "times": {p: int(os.lstat(p).st_mtime) for p in paths},
    "pyc_source_time": int.from_bytes(pyc[8:12], "little"),
    "base_time": int(os.lstat("/etc/debian_version").st_mtime)}))
"""


def dockerfile(base: str) -> str:
    return "\n".join([
        f"FROM {base}",
        "ARG NONCE",
        'RUN printf "%s\\n" "$NONCE" > /clamp-nonce.txt',
        "RUN " + json.dumps(["python3", "-c", INSTALL]),
        "ARG TOP=first",
        'RUN printf "%s\\n" "$TOP" > /clamp-top.txt',
        "",
    ])


class Bench:
    """The test's builds and clamps, and every image id they made (to remove them after)."""

    def __init__(self, engine, base: str, work: Path):
        from edgevllm.image.clamp import Moment, epoch_of
        from edgevllm.image.clampmemo import ClampMemo, memo_key

        self.engine, self.work = engine, work
        self.tag = f"{REPO}:{uuid.uuid4().hex[:12]}"
        self.nonce = uuid.uuid4().hex  # this run's images are its own, not another run's
        found = engine.image_inspect(base)
        floor = epoch_of(found["Created"])
        self.floor, self.keep = floor, frozenset(found["RootFS"]["Layers"])
        self.moment = Moment(floor, floor)
        self.memo = ClampMemo(work / "memo", memo_key(self.moment),
                              memo_key(self.moment, self.moment))
        self.made: set[str] = set()
        self.saves = 0
        (work / "context").mkdir(parents=True)
        (work / "context" / "Dockerfile").write_text(dockerfile(base))

    def build(self, *flags: str, top: str = "first") -> str:
        """The test's Dockerfile built under its tag; the unclamped image's id."""
        proc = self.engine.run_cli(
            ["build", "-q", "-t", self.tag, "--build-arg", f"NONCE={self.nonce}",
             "--build-arg", f"TOP={top}", *flags, str(self.work / "context")], timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()[-3000:]
        image_id = self.engine.image_id(self.tag)
        self.made.add(image_id)
        return image_id

    def clamp(self, hash_first: bool = False):
        """clamp_image as builder/tail.py's clamp_candidate calls it; the image BuildKit made
        removed after, as it is there."""
        from edgevllm.image.clampimage import clamp_image

        source = self.engine.image_id(self.tag)
        done = clamp_image(self.engine, self.tag, self.moment, self.work / "scratch", self.keep,
                           self.moment, self.memo, hash_first=hash_first)
        self.made.add(done.image_id)
        assert self.engine.image_id(self.tag) == done.image_id
        if source != done.image_id:
            self.engine.remove_image(source)
        assert not list((self.work / "scratch").iterdir())  # the scratch emptied
        return done

    def relabel(self, image: str) -> str:
        """``image`` with one more label (the same layers, another config), as the build's
        label step makes one; its id."""
        folder, named = self.work / "relabel", f"{self.tag}-relabel-from"
        folder.mkdir(exist_ok=True)
        (folder / "Dockerfile").write_text(f"FROM {named}\nLABEL io.edgevllm.test=relabel\n")
        self.engine.tag(image, named)  # BuildKit's FROM takes a name, not an image id
        try:
            proc = self.engine.run_cli(["build", "-q", str(folder)], timeout=300)
        finally:
            self.engine.run_cli(["rmi", named], timeout=120)  # the name only: the image stays
        assert proc.returncode == 0, proc.stderr.decode()[-3000:]
        image_id = proc.stdout.decode().strip().splitlines()[-1]
        self.made.add(image_id)
        return image_id

    def layers(self, image: str) -> list[str]:
        return list(self.engine.image_inspect(image)["RootFS"]["Layers"])

    def remove_all(self) -> None:
        self.engine.remove_image(self.tag)
        for image_id in self.made:
            if self.engine.image_exists(image_id):
                self.engine.remove_image(image_id)


@pytest.fixture
def bench(engine, python_image_native, tmp_path, monkeypatch):
    made = Bench(engine, python_image_native, tmp_path / "clamp")
    real_save = engine.save_stream

    @contextmanager
    def counted(refs):
        made.saves += 1
        with real_save(refs) as stream:
            yield stream

    monkeypatch.setattr(engine, "save_stream", counted)
    yield made
    made.remove_all()
    shutil.rmtree(tmp_path / "clamp")


def test_a_clamped_image_is_the_same_from_cache_rerun_or_one_step_changed(bench, engine):
    base_layers = len(bench.keep)

    # (a) The first clamp: the base's layers read past, the three RUN layers clamped.
    first_source = bench.build()
    source_layers = bench.layers(first_source)
    first = bench.clamp()
    image_a, layers_a = first.image_id, bench.layers(first.image_id)
    assert image_a != first_source and not first.from_memo
    assert first.read_past == base_layers and first.clamped == source_layers[base_layers:]
    assert len(first.clamped) == 3 and bench.saves == 1 and first.sent == 3
    assert layers_a[:base_layers] == source_layers[:base_layers]
    assert all(new != old for new, old in zip(layers_a[base_layers:],
                                              source_layers[base_layers:], strict=True))

    # (b) BuildKit's cache: the same unclamped image, tagged from the clamp cache, not saved.
    assert bench.build() == first_source
    again = bench.clamp()
    assert (again.from_memo, again.image_id, again.read_past) == (True, image_a, base_layers + 3)
    assert bench.saves == 1 and not again.clamped

    # (c) Every step rerun: new layers, new times; the same clamped image, no layer sent.
    rerun_source = bench.build("--no-cache")
    assert rerun_source != first_source
    assert bench.layers(rerun_source)[base_layers:] != source_layers[base_layers:]
    # As --check-reproducible's rerun: digests first, nothing written where the engine holds
    # the result; BuildKit's cache now holds these layers, which (d) takes: remembered too.
    rerun = bench.clamp(hash_first=True)
    assert (rerun.image_id, rerun.sent, rerun.from_memo) == (image_a, 0, False)
    assert rerun.digests_only and len(rerun.clamped) == 3 and rerun.read_past == base_layers
    assert bench.saves == 2

    # (e) In the clamped image: RECORD agrees with uv's record, the build's times are the floor.
    seen = json.loads(in_image(engine, image_a, CHECK, timeout=120))
    assert seen["uv"] == {"timestamp": {"secs_since_epoch": bench.floor, "nanos_since_epoch": 0}}
    assert seen["line"] == [seen["expected"]], seen
    assert set(seen["times"].values()) == {bench.floor}, seen["times"]
    assert seen["pyc_source_time"] == bench.floor and seen["base_time"] <= bench.floor

    # (d) The top step's argument changed: only its layer clamped, those below read past.
    bench.build(top="second")
    top = bench.clamp()
    layers_d = bench.layers(top.image_id)
    assert top.image_id != image_a and not top.from_memo
    assert top.read_past == base_layers + 2 and len(top.clamped) == 1 and top.sent == 1
    assert layers_d[:-1] == layers_a[:-1] and layers_d[-1] != layers_a[-1]

    # (f) The clamp cache names image A, which the engine no longer holds: read from the stream
    # again (only the top layer: the ones below are held by the image of (d)), the same image.
    engine.remove_image(image_a)
    assert not engine.image_exists(image_a)
    bench.build()
    back = bench.clamp()
    assert (back.image_id, back.from_memo, back.sent) == (image_a, False, 1)
    assert back.read_past == base_layers + 2 and len(back.clamped) == 1
    assert bench.layers(image_a) == layers_a

    # (g) The clamp cache names image A, which the engine no longer holds, but another image
    # holds every layer of it (the build's relabel step makes one: the same layers, another
    # config): A made again from its remembered config alone, no docker save, no layer sent.
    relabeled = bench.relabel(image_a)
    assert bench.layers(relabeled) == layers_a and relabeled != image_a
    engine.remove_image(image_a)
    bench.build()
    saves = bench.saves
    made_again = bench.clamp()
    assert (made_again.image_id, made_again.from_memo) == (image_a, True)
    assert bench.saves == saves and not made_again.clamped
    assert bench.layers(image_a) == layers_a
