"""docs/owners.md's owner table, held to the code: every owner module exists and defines what
the row names, every test named exists, a rule reads in a line; docs/architecture.md (the map)
points to it and holds no row; and the one-owner rules no other test holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support.checks import present

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edgevllm"
DOC = ROOT / "docs" / "owners.md"
MAP = ROOT / "docs" / "architecture.md"
MAX_RULE_CHARS = 120  # a row is the rule and its owner; the why is in the owner's caption


def owner_rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text()
    section = text.split("## One owner per rule", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in rows[1:]]
    return [(c[0], c[1], c[2]) for c in cells if not set(c[0]) <= {"-"}]


def defined_names(path: Path) -> set[str]:
    """Top-level functions, classes and assignments, and ``Class.member`` for class members."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{member.name}")
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_the_table_has_rows():
    assert len(owner_rows()) >= 15


def test_each_rule_reads_in_a_line_and_the_map_holds_no_row():
    long = [rule for rule, _, _ in owner_rows() if len(rule) > MAX_RULE_CHARS]
    assert not long, f"cut these rules to the rule (the why goes to the owner's caption): {long}"
    text = MAP.read_text()
    assert "owners.md" in text, "docs/architecture.md points to the ledger"
    assert "## One owner per rule" not in text and "| rule | owner |" not in text, \
        "owner rows belong in docs/owners.md"


@pytest.mark.parametrize("rule,owner,held_by", owner_rows(), ids=lambda v: str(v)[:40])
def test_every_owner_row_names_real_code_and_a_real_test(rule, owner, held_by):
    # owner: `mod.py` `name` ...; a second owner after ';' the same way
    current = None
    for token in re.findall(r"`([^`]+)`", owner):
        if token.endswith(".py"):
            current = PACKAGE / token
            assert current.is_file(), f"{rule}: no module edgevllm/{token}"
        else:
            assert current is not None, f"{rule}: '{token}' names no module first"
            assert token in defined_names(current), f"{rule}: {current.name} defines no {token}"
    named = re.findall(r"`([^`]+)`", held_by)
    assert named and re.fullmatch(r"(`[^`]+`\s*)+", held_by), f"{rule}: name tests in backticks"
    for test in named:  # the owner's test, then the net that fails when another does the job
        test_file, _, test_name = test.partition("::")
        path = ROOT / test_file
        assert path.is_file(), f"{rule}: no test file {test_file}"
        assert test_name in defined_names(path), f"{rule}: {test_file} has no {test_name}"


def py_files(*exempt: str):
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel not in exempt:
            yield rel, ast.parse(path.read_text())


def test_upstream_urls_are_spelt_once():
    spelt = {rel for rel, tree in py_files("specs/refs.py") for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and re.search(r"github\.com/(vllm-project/vllm|flashinfer-ai/flashinfer)\b",
                           node.value)}
    assert not spelt, "use edgevllm.specs.refs.UPSTREAM_REPOS"


# Readers of label JSON besides the owners, and why.
OTHER_LABEL_JSON: dict[str, str] = {}


def test_record_labels_are_parsed_in_one_place():
    found = set()
    for rel, tree in py_files("common/labels.py", "image/records.py"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "json.loads" \
                    and re.search(r"label", ast.unparse(node), re.I):
                found.add(rel)
    assert found - set(OTHER_LABEL_JSON) == set(), "read records with common.labels.label_record"
    assert set(OTHER_LABEL_JSON) - found == set(), "no longer parses label JSON: drop it"


RECORD_PATHS = {"MODS_RECORD", "WARM_RECORD", "LOCK_FILE", "LOCK_IMAGE_PATH", "HOME", "RECORD_DIR"}


def reads_an_image_record(tree: ast.AST, readers: set[str]) -> bool:
    """A file taken out of an image (``cat`` as a container's entrypoint), or a record's in-image
    path handed to anything but image/records.py's readers."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if any(k.arg == "entrypoint" and isinstance(k.value, ast.Constant)
               and k.value.value == "cat" for k in node.keywords):
            return True
        callee = ast.unparse(node.func).rsplit(".", 1)[-1]
        args = [*node.args, *(k.value for k in node.keywords)]
        if callee not in readers and any(
                isinstance(a, (ast.Name, ast.Attribute)) and ast.unparse(a).rsplit(".", 1)[-1]
                in RECORD_PATHS for a in args):
            return True
    return False


def test_image_records_are_read_in_one_place():
    """Reading a record out of an image (a container run to ``cat`` it, or its path handed to a
    reader) happens in image/records.py; the in-image scripts read their own files."""
    from edgevllm.common.labels import IN_IMAGE_SCRIPTS

    readers = defined_names(PACKAGE / "image" / "records.py")
    found = {rel for rel, tree in py_files("image/records.py", *IN_IMAGE_SCRIPTS)
             if reads_an_image_record(tree, readers)}
    assert not found, f"read image records with edgevllm.image.records: {sorted(found)}"
    stray = ast.parse("engine.run(RunOptions(image=ref, entrypoint='cat', command=[p]))\n"
                      "def f(): return engine.copy_from(c, labels.MODS_RECORD, dest)")
    assert reads_an_image_record(stray, readers)


IMAGE_LABELS = {"TARGET", "PLATFORM", "ARCH_LIST", "MODS_SELECTED", "MODE", "VLLM_SHA", "VLLM_PR",
                "PRS", "MODS_VERSIONS", "TAG", "KERNEL_PLAN", "VLLM_RS", "VLLM_WHEEL_SHA", "LOCK",
                "LOCK_SHA", "MODS", "VERIFY", "PROBE"}


def test_image_labels_are_written_in_one_place():
    """Dicts keyed by an image label are built in builder/steps.py, and by a mode for its own."""
    writers = set()
    for rel, tree in py_files():
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and any(
                    isinstance(k, ast.Attribute) and ast.unparse(k).startswith("labels.")
                    and k.attr in IMAGE_LABELS for k in node.keys if k is not None):
                writers.add(rel)
    assert {w for w in writers if not w.startswith("builder/modes/")} == {"builder/steps.py"}


def test_engines_are_named_in_one_place():
    made = {rel for rel, tree in py_files("containers/docker.py") for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "DockerEngine"
            and any(k.arg in ("host", "context") for k in node.keywords)}
    assert not made, "get an engine from a flag with DockerEngine.named"


def test_image_layers_are_read_in_one_place():
    """Whiteouts are the mark of reading an image's layers: only verify/archive.py spells them."""
    spelt = {rel for rel, tree in py_files("verify/archive.py") for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and ".wh." in node.value}
    assert not spelt, "read an image's layers with edgevllm.verify.archive.read_image"


# --- nets: each fails when a module other than the row's owner does the row's job -------------
def offenders(check, *exempt: str) -> set[str]:
    return {rel for rel, tree in py_files(*exempt) if any(check(n) for n in ast.walk(tree))}


def calls(name: str):
    return lambda n: isinstance(n, ast.Call) and ast.unparse(n.func).rsplit(".", 1)[-1] == name


def test_build_flags_are_declared_in_one_place():
    """A build flag is a row of cli/flags.py's table; buildmany's own two are its task's."""
    assert offenders(calls("Flag"), "cli/flags.py") == {"cli/buildmany.py"}
    assert calls("Flag")(ast.parse("Flag('a', '')", mode="eval").body)


def test_mods_are_selected_in_one_place():
    """``--add-mod``/``--no-mod`` are read by the selection rule, handed to it by the spec."""
    reads = lambda n: isinstance(n, ast.Attribute) and n.attr in ("add_mods", "remove_mods")  # noqa: E731
    assert offenders(reads, "specs/modselect.py", "specs/buildspec.py") == set()
    assert reads(ast.parse("spec.add_mods", mode="eval").body)


def test_targets_are_read_in_one_place():
    """The targets' folders are walked by specs/targets.py alone (load_target, all_targets)."""
    def walks(n):
        return calls("data_dirs")(n) and any(isinstance(a, ast.Constant) and a.value == "targets"
                                             for a in n.args)
    assert offenders(walks, "specs/targets.py") == set()
    assert walks(ast.parse("data_dirs('targets')", mode="eval").body)


def handles_validation_itself(node: ast.AST) -> bool:
    """An ``except ValidationError`` whose body formats the error without common/schema.py."""
    if not (isinstance(node, ast.ExceptHandler) and node.type is not None
            and "ValidationError" in ast.unparse(node.type)):
        return False
    helpers = defined_names(PACKAGE / "common" / "schema.py")
    return not any(isinstance(c, ast.Call) and ast.unparse(c.func).rsplit(".", 1)[-1] in helpers
                   for c in ast.walk(node))


def test_validation_errors_are_worded_in_one_place():
    """Every ValidationError becomes a line through common/schema.py (grammar.py words one
    field's own grammar message)."""
    assert offenders(handles_validation_itself, "common/schema.py", "common/grammar.py") == set()
    stray = ast.parse("try:\n    f()\nexcept ValidationError as e:\n    raise X(e.errors())")
    assert any(handles_validation_itself(n) for n in ast.walk(stray))


def test_base_image_locks_are_made_in_one_place():
    assert offenders(calls("BaseImageLock"), "builder/steps.py", "specs/lock.py") == set()


def test_a_locks_mode_is_compared_in_one_place():
    """Whether a lock rebuilds this mode is builder/modes/__init__.check_lock_mode's question."""
    def compares(n):
        return isinstance(n, ast.Compare) and any(
            isinstance(side, ast.Attribute) and side.attr == "mode"
            and "lock" in ast.unparse(side.value).lower() for side in [n.left, *n.comparators])
    assert offenders(compares, "builder/modes/__init__.py") == set()
    assert compares(ast.parse("locked.mode != mode", mode="eval").body)


def test_the_wheel_cache_is_fetched_and_published_in_one_place():
    """The registry artifact (image/wheelcache.py) is fetched and published for a build by
    builder/wheelcache.py alone."""
    def imports(n):
        return isinstance(n, ast.ImportFrom) and n.module == "edgevllm.image.wheelcache" \
            and any(a.name in ("fetch", "publish") for a in n.names)
    assert offenders(imports, "builder/wheelcache.py") == set()


def test_distributions_are_found_in_one_place():
    """What a Python distribution is (its ``.dist-info``) is spelt by inspect/inimage_dists.py
    (and offline.py, which reuses it for a published set); the applier runs in the image."""
    from edgevllm.common.labels import IN_IMAGE_SCRIPTS

    def spells(n):
        return isinstance(n, ast.Constant) and isinstance(n.value, str) and ".dist-info" in n.value
    assert offenders(spells, "inspect/offline.py", *IN_IMAGE_SCRIPTS) == set()


def test_the_compiled_wheels_artifact_is_spelt_in_one_place():
    """The artifact's media types (``application/vnd.edgevllm.…``) live in image/wheelcache.py."""
    def spells(n):
        return isinstance(n, ast.Constant) and isinstance(n.value, str) \
            and "vnd.edgevllm." in n.value
    assert offenders(spells, "image/wheelcache.py") == set()


def test_closures_are_resolved_in_one_place():
    """uv (the resolver) runs in sources/wheels.py alone: no mode resolves a closure itself."""
    assert offenders(calls("uv_binary"), "sources/wheels.py") == set()


def test_dockerfile_stages_are_read_in_one_place():
    """A rendered Dockerfile's FROM lines (stages, their bases and platforms) are read by
    builder/dockerfile.py alone: the compile key and preflight's base check ask it."""
    def spells(n):
        return isinstance(n, ast.Constant) and isinstance(n.value, str) \
            and n.value.lstrip("^").upper().startswith("FROM[")
    assert offenders(spells, "builder/dockerfile.py") == set()
    assert spells(ast.parse("r'^FROM[ \\t]+'", mode="eval").body)


def raises_missing_input_otherwise(node: ast.AST) -> bool:
    """A ``raise`` saying "no such file" with an error class whose exit code is not an input
    error's (2)."""
    from edgevllm.common import errors

    if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and "no such file" in ast.unparse(node.exc).lower()):
        return False
    kind = getattr(errors, ast.unparse(node.exc.func).rsplit(".", 1)[-1], None)
    return not (isinstance(kind, type) and getattr(kind, "exit_code", None) == 2)


def test_a_missing_input_is_an_input_error_everywhere():
    assert offenders(raises_missing_input_otherwise, "common/errors.py") == set()
    stray = ast.parse("raise RecipeError(f'bundle {p}: no such file')")
    assert raises_missing_input_otherwise(stray.body[0])


def constant(n: ast.AST, test) -> bool:
    return isinstance(n, ast.Constant) and isinstance(n.value, str) and test(n.value)


def matches_a_change_url(n: ast.AST) -> bool:
    """A PR or commit URL recognised by hand: ``"/pull/" in x``, or a pattern naming ``/pull/``."""
    def url_part(s: str) -> bool:
        return "/pull/" in s or "/commit/" in s
    if isinstance(n, ast.Compare) and isinstance(n.ops[0], (ast.In, ast.NotIn)):
        return constant(n.left, url_part)
    return isinstance(n, ast.Call) and ast.unparse(n.func).startswith("re.") and any(
        constant(a, url_part) for a in n.args)


def test_pr_urls_are_read_in_one_place():
    """A PR or commit URL is recognised by specs/refs.py alone (``parse_pr_arg``,
    ``parse_change_url``); the cherry-picks and a recipe's build_args ask it."""
    assert offenders(matches_a_change_url, "specs/refs.py") == set()
    stray = ast.parse("'/pull/' in spec\nre.compile(r'^(#?\\d+|https?://\\S+/pull/\\d+)')")
    assert sum(matches_a_change_url(n) for n in ast.walk(stray)) == 2


def test_deadlines_are_polled_in_one_place():
    """Waiting until something happens or a deadline passes is common/poll.py's loop: no other
    module sleeps (the in-image scripts run without edgevllm)."""
    from edgevllm.common.labels import IN_IMAGE_SCRIPTS

    assert offenders(calls("sleep"), "common/poll.py", *IN_IMAGE_SCRIPTS) == set()
    assert calls("sleep")(ast.parse("time.sleep(0.5)", mode="eval").body)


def opens_a_tar_to_read(n: ast.AST) -> bool:
    if not (isinstance(n, ast.Call) and ast.unparse(n.func) == "tarfile.open"):
        return False
    mode = next((k.value for k in n.keywords if k.arg == "mode"), n.args[1] if len(n.args) > 1
                else None)
    return not (isinstance(mode, ast.Constant) and str(mode.value).startswith(("w", "x", "a")))


def test_tars_are_read_through_the_gate():
    """Every tar reader (published sets, layers, docker save, cache bundles) opens it through
    common/archives.py; writers open their own."""
    assert offenders(opens_a_tar_to_read, "common/archives.py") == set()
    stray = ast.parse("tarfile.open(fileobj=f, mode='r|')\ntarfile.open(p)\n"
                      "tarfile.open(fileobj=out, mode='w|')")
    assert sum(opens_a_tar_to_read(n) for n in ast.walk(stray)) == 2


def test_a_credential_header_is_sent_through_the_origin_bound_session():
    """A module that sets ``Authorization`` sends it with common/http.py's credential_session."""
    def sets_it(tree: ast.AST) -> bool:
        return any(constant(n, lambda s: s.lower() == "authorization") or calls("bearer")(n)
                   for n in ast.walk(tree))
    found = {rel for rel, tree in py_files("common/http.py") if sets_it(tree)
             and not any(calls("credential_session")(n) for n in ast.walk(tree))}
    assert not found, f"send a credential with edgevllm.common.http.credential_session: {found}"
    assert sets_it(ast.parse("requests.get(u, headers={'Authorization': t})"))
    assert sets_it(ast.parse("requests.post(u, headers=bearer(t))"))


def test_bubblewrap_is_started_in_one_place():
    """The sandbox's argv (bubblewrap, its namespaces) is common/sandbox.py's."""
    def spells(n):
        return constant(n, lambda s: s == "bwrap" or s.startswith("--unshare"))
    assert offenders(spells, "common/sandbox.py") == set()
    assert any(spells(n) for n in ast.walk(ast.parse("shutil.which('bwrap')")))


def test_children_are_bounded_in_one_place():
    """Resource limits on a child (address space, file size) are set by common/bounded.py."""
    def limits(n):
        return isinstance(n, ast.Attribute) and (n.attr == "setrlimit"
                                                 or n.attr.startswith("RLIMIT_"))
    assert offenders(limits, "common/bounded.py") == set()
    stray = ast.parse("resource.setrlimit(resource.RLIMIT_AS, (1, 1))", mode="eval")
    assert sum(limits(n) for n in ast.walk(stray)) == 2


def test_terminal_escapes_are_handled_in_one_place():
    """The escape character is spelt (to be escaped) by common/escape.py alone."""
    def spells(n):
        return constant(n, lambda s: "\x1b" in s or "\x9b" in s)
    assert offenders(spells, "common/escape.py") == set()
    assert any(spells(n) for n in ast.walk(ast.parse("s.replace('\\x1b', '?')")))


def test_secret_shapes_are_spelt_in_one_place():
    """What a token looks like (its prefix) is common/secrets.py's."""
    prefixes = ("hf_", "ghp_", "gho_", "github_pat_", "glpat-", "xoxb-", "sk-", "AKIA")
    def spells(n):
        return constant(n, lambda s: s.startswith(prefixes) and "_cache" not in s
                        and "_home" not in s)
    assert offenders(spells, "common/secrets.py") == set()
    assert any(spells(n) for n in ast.walk(ast.parse("t.startswith('ghp_')")))


def test_the_wheel_cache_keys_are_read_in_one_place():
    """Which keys the wheel cache trusts is builder/wheelcache.trusted_keys's answer."""
    def reads(n):
        return isinstance(n, ast.Call) and any(
            constant(a, lambda s: s == "EDGEVLLM_WHEEL_CACHE_KEYS") for a in n.args)
    assert offenders(reads, "builder/wheelcache.py") == set()
    assert reads(ast.parse("os.environ.get('EDGEVLLM_WHEEL_CACHE_KEYS')", mode="eval").body)


def test_cross_roads_are_spelt_in_one_place():
    """A GNU triple or nvcc's target folder is a cross road's fact (specs/crossroads.yaml, read
    by specs/cross.py); the in-image script gets them as arguments."""
    from edgevllm.common.labels import IN_IMAGE_SCRIPTS

    def spells(n):
        return constant(n, lambda s: bool(re.fullmatch(r"[a-z0-9_]+-(unknown-)?linux-gnu\w*|"
                                                       r"(sbsa|aarch64|x86_64)-linux", s)))
    assert offenders(spells, "specs/cross.py", *IN_IMAGE_SCRIPTS) == set()
    assert spells(ast.parse("'aarch64-linux-gnu'", mode="eval").body)


def test_a_published_set_reaches_docker_load_only_after_its_check():
    """``docker load`` of a published set happens in image/load.load, after check_archive, and
    of an offline bundle's layout in image/ocilayout.load_layout, which serve/deploy.py calls
    after the signed manifest and every file's sha256 checked; the only other load is
    distribute's pipe from a ``docker save`` of this engine's image."""
    assert offenders(calls("load_from"), "image/load.py", "image/ocilayout.py") == set()
    assert offenders(calls("load_stream"), "serve/cache/distribute.py") == set()
    assert calls("load_from")(ast.parse("engine.load_from(feed)", mode="eval").body)


def test_mod_downloads_are_fetched_in_one_place():
    """A mod's downloads are fetched by mods/downloads.py through common/http's gate; nothing in
    the mods or the recipes (import included) opens a connection of its own."""
    assert offenders(calls("fetch_bounded"), "common/http.py", "mods/downloads.py") == set()

    def connects(n):
        return isinstance(n, (ast.Import, ast.ImportFrom)) and any(
            (getattr(n, "module", None) or a.name).split(".")[0] in ("urllib", "requests", "http")
            and "parse" not in (getattr(n, "module", None) or a.name) for a in n.names)
    found = {rel for rel, tree in py_files() if rel.startswith(("mods/", "serve/recipe/"))
             and any(connects(n) for n in ast.walk(tree))}
    assert not found, f"fetch a mod's files with edgevllm.mods.downloads: {found}"
    assert connects(ast.parse("import urllib.request").body[0])

# Modules that open connections, and what each reaches: the user's choice or the builder's own
CONNECTS = {
    "common/http.py": "URLs others chose (fetch_bounded); a credential's origin",
    "builder/distpool/probe.py": "the sccache-dist scheduler the user names (credential_session)",
    "image/registry.py": "the registry the user names (credential_session)",
    "image/registryauth.py": "that registry's token realm (credential_session)",
    "perf/client.py": "the endpoint inv bench is given",
    "perf/sweep.py": "the endpoint inv bench is given",
    "perf/roofline.py": "the Hub (HF_ENDPOINT), through credential_session",
    "probe/level2.py": "the server the probe started",
    "serve/inimage_startprobe.py": "the server this process started",
}


def test_urls_others_chose_are_fetched_by_common_http_alone():
    """A URL others chose (a mod's download, anything a tree, recipe or import names) is
    fetched by common/http.fetch_bounded: no login, cookie or engine credential, a deadline,
    the redirect rules. Every other module that opens a connection is listed in CONNECTS with
    what it reaches; a new one is a URL of the user's or the builder's own, said there."""
    clients = ("requests", "urllib.request", "http.client", "urllib3", "aiohttp", "httpx",
               "socket")

    def connects(n):
        names = [n.module or ""] if isinstance(n, ast.ImportFrom) else \
            [a.name for a in n.names] if isinstance(n, ast.Import) else []
        return any(name == c or name.startswith(c + ".") for name in names for c in clients)
    found = {rel for rel, tree in py_files() if any(connects(n) for n in ast.walk(tree))}
    assert found <= set(CONNECTS), f"fetch a URL others chose with fetch_bounded: " \
        f"{found - set(CONNECTS)}"
    assert connects(ast.parse("from http.client import HTTPConnection").body[0])
    assert not connects(ast.parse("import http.cookiejar").body[0])


def test_git_objects_are_hashed_in_one_place():
    """A git blob or tree id (a supplied folder's identity) is computed by sources/gittree.py
    alone: no other module spells an object's header."""
    def spells(n):
        return isinstance(n, ast.Constant) and isinstance(n.value, (bytes, str)) and (
            n.value[:5] in (b"blob ", b"tree ", "blob ", "tree ") and "%" in str(n.value)
            or n.value in (b"blob ", b"tree ", "blob ", "tree "))
    assert offenders(spells, "sources/gittree.py") == set()
    assert spells(ast.parse('b"blob %d\\0"', mode="eval").body)
    assert spells(ast.parse('"tree "', mode="eval").body)


def test_supplied_folders_are_read_through_their_gate():
    """A supplied dependency folder is surveyed and taken by sources/depfolder.py only, and that
    module runs no child (no git in a folder from others)."""
    reads = lambda n: calls("survey")(n) or calls("take")(n)  # noqa: E731
    assert offenders(reads, "sources/depfolder.py", "sources/cmakedeps.py") == set()
    gate = ast.parse((PACKAGE / "sources" / "depfolder.py").read_text())
    imported = {(getattr(n, "module", None) or a.name).split(".")[-1] for n in ast.walk(gate)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert not imported & {"subprocess", "gitcache", "bounded", "sandbox", "cherrypick"}
    starts = {"system", "popen", "Popen", "run", "run_bounded", "GitMirror", "execv", "spawnv"}
    assert not [n for n in ast.walk(gate) if isinstance(n, ast.Call)
                and ast.unparse(n.func).rsplit(".", 1)[-1] in starts]


# Folders removed outside common/fsutil.py, and why each is edgevllm's own.
OTHER_REMOVERS = {"mods/eugr.py": "replaces an earlier eugr import, known by its manifest "
                                  "(_check_imported refuses any other folder first)"}


def test_folders_are_deleted_in_one_place():
    """Deleting a folder is common/fsutil.py's (only what edgevllm wrote); a scratch folder of
    this process is a TemporaryDirectory; the in-image scripts clean their own."""
    from edgevllm.common.labels import IN_IMAGE_SCRIPTS

    found = offenders(calls("rmtree"), "common/fsutil.py", *IN_IMAGE_SCRIPTS)
    assert found - set(OTHER_REMOVERS) == set(), "delete through edgevllm.common.fsutil"
    assert set(OTHER_REMOVERS) - found == set(), "no longer deletes a folder: drop it"
    assert calls("rmtree")(ast.parse("shutil.rmtree(p)", mode="eval").body)


def test_a_builds_disk_is_checked_where_its_engine_builds():
    """Free disk for a build is asked through containers/enginehost.py (this machine's output
    for a local engine, the engine's machine over ssh otherwise), never by reading this
    machine's disk by the build's rule: a remote build checked here would pass on the wrong
    disk. (A file this machine writes, a published tarball, reads its own folder's disk.)"""
    assert offenders(calls("check_disk"), "containers/host.py", "containers/enginehost.py") == set()
    assert calls("check_disk")(ast.parse("host.check_disk(out, 8)", mode="eval").body)


def test_host_reaching_run_flags_are_judged_in_one_place():
    """The docker run flags that reach the host (devices, capabilities, privileges, namespaces)
    are judged by serve/recipe/hostaccess.py, spelt into argv by containers/options.py, and
    made from the target's RDMA data by serve/rdma.py alone: a second reader of a recipe's
    flags would be a second, weaker gate."""
    reach = {"--device", "--cap-add", "--privileged", "--security-opt", "--pid", "--userns"}
    spells = lambda n: constant(n, lambda s: s.split("=", 1)[0] in reach)  # noqa: E731
    assert offenders(spells, "serve/recipe/hostaccess.py", "containers/options.py",
                     "serve/rdma.py") == set()
    assert sum(spells(n) for n in ast.walk(ast.parse("['--privileged', '--pid=host']"))) == 2


def test_the_toolchain_file_is_rendered_and_staged_in_one_place():
    """The cross toolchain file is rendered by builder/render.py for the compile mode alone
    (builder/modes/compile.py) and staged by builder/cross/context.py alone (its sha256 is a
    compile-key input: a second writer could change the file unkeyed)."""
    assert offenders(calls("render_toolchain"), "builder/modes/compile.py") == set()
    assert offenders(calls("stage_cross"), "builder/modes/compile.py") == set()
    template = lambda n: constant(n, lambda s: s.endswith("toolchain.cmake.j2"))  # noqa: E731
    assert offenders(template, "builder/render.py") == set()
    assert calls("render_toolchain")(ast.parse("render.render_toolchain(road)", mode="eval").body)


def test_a_partial_build_is_spelt_in_one_place():
    """The partial kernel build's context and settings (``edgevllm-extensions``,
    ``EDGEVLLM_EXTENSIONS``, the target's leave-out ``EDGEVLLM_LEAVE_OUT`` and its
    ``leave-out.json``) are builder/subset/plan.py's; the in-image inimage_cmake.py reads the
    setting. A second spelling could put a wrapper in a compile the key does not count."""
    spells = lambda n: constant(n, lambda s: s in ("edgevllm-extensions",  # noqa: E731
                                                   "EDGEVLLM_EXTENSIONS",
                                                   "EDGEVLLM_LEAVE_OUT", "leave-out.json"))
    assert offenders(spells, "builder/subset/plan.py", "builder/subset/inimage_cmake.py") == set()
    assert offenders(calls("restrict"), "builder/tree.py", "builder/subset/plan.py") == set()
    assert spells(ast.parse("'EDGEVLLM_EXTENSIONS'", mode="eval").body)


def test_part_names_are_spelt_in_one_place():
    """A split set's part names (<file>.part000, ...) are written, found and recognised through
    image/tarmanifest.py: a second spelling once took any name holding ".part" for a tarball."""
    def names_a_part(s: str) -> bool:   # not ".partial", not prose
        return re.search(r"\.part(\d|\[|\Z)", s) is not None
    spells = lambda n: constant(n, names_a_part)  # noqa: E731
    assert offenders(spells, "image/tarmanifest.py") == set()
    assert sum(spells(n) for n in ast.walk(ast.parse("f'{name}.part{i:03d}'"))) == 1


def test_each_cache_folder_has_one_owner():
    """Each folder of the edgevllm cache (``common/paths.cache_dir``) is read and written by one
    module: the verdict cache's ``verify`` by verify/verdictcache.py, the probe's by
    probe/factcache.py, JIT bundles by serve/cache/bundle.py, and so on. A second module writing
    into another's folder would bypass its key, bound and checks."""
    owners: dict[str, set[str]] = {}
    for rel, tree in py_files("common/paths.py"):
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and calls("cache_dir")(n) and n.args \
                    and isinstance(n.args[0], ast.Constant):
                owners.setdefault(str(n.args[0].value), set()).add(rel)
    assert {name: mods for name, mods in owners.items() if len(mods) > 1} == {}
    assert owners["verify"] == {"verify/verdictcache.py"}
    assert owners["probe"] == {"probe/factcache.py"}
    assert owners["jit-bundles"] == {"serve/cache/bundle.py"}


def test_the_build_mode_is_chosen_in_one_place():
    """The mode rule (specs/moderule.py ``choose_mode``) is asked by ``buildspec.resolve`` alone:
    anyone else picking a mode would be a second rule."""
    assert offenders(calls("choose_mode"), "specs/buildspec.py") == set()
    assert calls("choose_mode")(ast.parse("buildspec.choose_mode(spec, b)", mode="eval").body)


def test_requirement_lines_are_parsed_in_one_place():
    """A requirement line is parsed by common/requirements.py (data only: no URL, path or
    option); builder/modes/compile.py only names lines the tree reader already passed through
    it. A module parsing requirements itself could hand the resolver a direct reference."""
    assert offenders(calls("Requirement"), "common/requirements.py") == {
        "builder/modes/compile.py"}
    assert calls("Requirement")(ast.parse("packaging.requirements.Requirement(t)",
                                          mode="eval").body)
