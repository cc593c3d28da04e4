"""repository.py on real files: atomic writes, refusal and backups, nothing half-written, diff, read-back."""

import re

import pytest

from workbench.generate.config import to_text
from workbench.generate.repository import (
    RepositoryError,
    compare_model_dir,
    diff_model_dir,
    read_model_dir,
    response_cache_models,
    version_folders,
    write_model_dir,
)

CONFIG = 'name: "m"\nbackend: "python"\n'


def listing(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def test_writes_str_bytes_files_and_directories(tmp_path):
    artifact = tmp_path / "src" / "model.pt"
    artifact.parent.mkdir()
    artifact.write_bytes(b"\x00\x01weights")
    saved = tmp_path / "src" / "saved_model"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"pb")
    (saved / "variables" / "v.index").write_bytes(b"idx")
    dest = tmp_path / "repo" / "m"
    result = write_model_dir(dest, {"config.pbtxt": CONFIG, "1/model.py": b"print(1)\n", "1/model.pt": artifact,
                                    "1/saved": saved})
    assert result.path == dest and result.backup is None
    assert (dest / "config.pbtxt").read_text() == CONFIG
    assert (dest / "1" / "model.py").read_bytes() == b"print(1)\n"
    assert (dest / "1" / "model.pt").read_bytes() == b"\x00\x01weights"
    assert (dest / "1" / "saved" / "variables" / "v.index").read_bytes() == b"idx"
    assert (dest.stat().st_mode & 0o777) == 0o755
    assert [p.name for p in (tmp_path / "repo").iterdir()] == ["m"]


def test_existing_directory_is_refused_and_untouched(tmp_path):
    dest = tmp_path / "m"
    dest.mkdir()
    (dest / "mine.txt").write_text("hand edit")
    with pytest.raises(RepositoryError, match=r"already exists; nothing was written.*--force"):
        write_model_dir(dest, {"config.pbtxt": CONFIG})
    assert listing(dest) == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_overwrite_keeps_the_old_directory_as_a_backup(tmp_path):
    dest = tmp_path / "m"
    write_model_dir(dest, {"config.pbtxt": "old"})
    first = write_model_dir(dest, {"config.pbtxt": "new"}, overwrite=True)
    second = write_model_dir(dest, {"config.pbtxt": "newer"}, overwrite=True)
    assert (dest / "config.pbtxt").read_text() == "newer"
    assert re.fullmatch(r"m\.bak-\d{8}-\d{6}(-\d+)?", first.backup.name)
    assert re.fullmatch(r"m\.bak-\d{8}-\d{6}(-\d+)?", second.backup.name)
    # outside the repository folder, which a default-mode tritonserver would try to load whole
    assert first.backup.parent == second.backup.parent == tmp_path.parent / f"{tmp_path.name}.backups"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert first.backup != second.backup
    assert (first.backup / "config.pbtxt").read_text() == "old"
    assert (second.backup / "config.pbtxt").read_text() == "new"


def test_failure_halfway_leaves_nothing_behind(tmp_path):
    """A lone surrogate cannot be encoded: the second file fails after the first was written."""
    dest = tmp_path / "m"
    with pytest.raises(UnicodeEncodeError):
        write_model_dir(dest, {"a.txt": "fine", "b.txt": "\ud800"})
    assert list(tmp_path.iterdir()) == []
    write_model_dir(dest, {"config.pbtxt": "kept"})
    with pytest.raises(UnicodeEncodeError):
        write_model_dir(dest, {"a.txt": "fine", "b.txt": "\ud800"}, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
    assert listing(dest) == ["config.pbtxt"] and (dest / "config.pbtxt").read_text() == "kept"


@pytest.mark.parametrize("bad", ["/etc/passwd", "../escape.txt", "1/../../x", "", "."])
def test_paths_outside_the_directory_are_refused_before_writing(tmp_path, bad):
    with pytest.raises(RepositoryError, match="must be a relative path inside the model directory"):
        write_model_dir(tmp_path / "m", {"config.pbtxt": CONFIG, bad: "x"})
    assert list(tmp_path.iterdir()) == []


def test_missing_source_file_and_bad_content_are_named(tmp_path):
    with pytest.raises(RepositoryError, match=r"1/model.pt: source .*nope.pt does not exist"):
        write_model_dir(tmp_path / "m", {"1/model.pt": tmp_path / "nope.pt"})
    with pytest.raises(RepositoryError, match="1/x: content must be bytes, str or a Path, got int"):
        write_model_dir(tmp_path / "m", {"1/x": 3})
    with pytest.raises(RepositoryError, match="1/model.py cannot be written: 1 is also given as a file"):
        write_model_dir(tmp_path / "m", {"1": "x", "1/model.py": "y"})
    assert list(tmp_path.iterdir()) == []


def test_dest_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "m").write_text("a file")
    with pytest.raises(RepositoryError, match="is not a directory"):
        write_model_dir(tmp_path / "m", {"config.pbtxt": CONFIG}, overwrite=True)
    assert (tmp_path / "m").read_text() == "a file"


def test_diff_shows_changed_new_removed_and_binary_files(tmp_path):
    dest = tmp_path / "m"
    write_model_dir(dest, {"config.pbtxt": "a\nb\n", "1/model.py": "x = 1\n", "old.txt": "gone\n", "w.bin": b"\xff\x00"})
    (dest / "1" / "__pycache__").mkdir()
    (dest / "1" / "__pycache__" / "model.cpython-312.pyc").write_bytes(b"\x00")
    files = {"config.pbtxt": "a\nc\n", "1/model.py": "x = 1\n", "new.txt": "hello\n", "w.bin": b"\xfe\x00"}
    diff = diff_model_dir(dest, files)
    assert "--- a/config.pbtxt\n+++ b/config.pbtxt\n" in diff and "-b\n+c\n" in diff
    assert "--- /dev/null\n+++ b/new.txt\n" in diff and "+hello\n" in diff
    assert "--- a/old.txt\n+++ /dev/null\n" in diff and "-gone\n" in diff
    assert "Binary files a/w.bin and b/w.bin differ\n" in diff
    assert "model.py" not in diff and "__pycache__" not in diff


def test_diff_is_empty_when_identical_and_everything_is_new_for_a_missing_dir(tmp_path):
    src = tmp_path / "artifact.pt"
    src.write_bytes(b"w")
    files = {"config.pbtxt": CONFIG, "1/model.pt": src}
    write_model_dir(tmp_path / "m", files)
    assert diff_model_dir(tmp_path / "m", files) == ""
    fresh = diff_model_dir(tmp_path / "other", {"config.pbtxt": "x"})
    assert fresh == "--- /dev/null\n+++ b/config.pbtxt\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n"


def test_read_model_dir_returns_config_and_other_files(tmp_path):
    from workbench.generate.config import build_config
    from workbench.spec import ModelSpec

    cfg = build_config("m", ModelSpec.parse(["INPUT__0,FP32,4"], ["OUTPUT__0,FP32,4"]))
    write_model_dir(tmp_path / "m", {"config.pbtxt": to_text(cfg), "1/model.py": "pass\n"})
    read_cfg, files = read_model_dir(tmp_path / "m")
    assert read_cfg == cfg
    assert files == {"1/model.py": tmp_path / "m" / "1" / "model.py"}
    with pytest.raises(RepositoryError, match="is not a model directory"):
        read_model_dir(tmp_path / "absent")


def test_version_folders_are_the_ones_triton_loads(tmp_path):
    """Numeric names without a leading zero (Triton 2.51 skips `01`), in numeric order; files and other names are not versions."""
    for name in ("10", "2", "1", "0", "01", "v3", "1a", "__pycache__"):
        (tmp_path / name).mkdir()
    (tmp_path / "3").write_text("a file, not a folder")
    assert [p.name for p in version_folders(tmp_path)] == ["0", "1", "2", "10"]


def test_an_unchanged_directory_is_left_alone_and_changes_are_listed(tmp_path):
    dest = tmp_path / "m"
    files = {"config.pbtxt": 'name: "m"\nbackend: "python"\nmax_batch_size: 4\n', "1/model.py": "x = 1\n"}
    write_model_dir(dest, files)
    stamp = (dest / "config.pbtxt").stat().st_mtime_ns
    again = write_model_dir(dest, files)
    assert again.unchanged and again.backup is None and (dest / "config.pbtxt").stat().st_mtime_ns == stamp
    (dest / "notes.txt").write_text("mine")
    changes = compare_model_dir(dest, {**files, "config.pbtxt": 'name: "m"\nbackend: "python"\n', "2/model.py": "y\n"})
    assert (changes.added, changes.removed, changes.modified) == (("2/model.py",), ("notes.txt",), ("config.pbtxt",))
    assert changes.config_changes == ("drops max_batch_size (was 4)",)
    assert changes.summary().splitlines() == ["removes notes.txt", "drops max_batch_size (was 4)", "adds 2/model.py",
                                              "changes config.pbtxt"]
    assert changes.headline() == "1 file(s) removed; 1 file(s) changed; 1 file(s) added; drops config fields in " \
                                 "max_batch_size"
    assert "--- a/notes.txt\n+++ /dev/null" in changes.diff
    reformatted = compare_model_dir(dest, {**files, "notes.txt": "mine",
                                           "config.pbtxt": 'backend: "python" name: "m" max_batch_size: 4'})
    assert reformatted.config_changes == ("rewrites config.pbtxt with the same ModelConfig (its layout and comments "
                                          "change)",)
    assert not compare_model_dir(tmp_path / "absent", files).exists


def test_a_confirmation_writes_exactly_what_was_reviewed(tmp_path):
    dest = tmp_path / "m"
    write_model_dir(dest, {"config.pbtxt": "old\n", "keep.txt": "mine\n"})
    new = {"config.pbtxt": "new\n"}
    changes = compare_model_dir(dest, new)
    (dest / "keep.txt").write_text("edited after the review\n")
    with pytest.raises(RepositoryError, match="changed since those changes were reviewed; nothing was written"):
        write_model_dir(dest, new, confirm=changes)
    with pytest.raises(RepositoryError, match="changed since those changes were reviewed"):
        write_model_dir(dest, {"config.pbtxt": "newer\n"}, confirm=compare_model_dir(dest, new))
    assert (dest / "config.pbtxt").read_text() == "old\n"
    result = write_model_dir(dest, new, confirm=compare_model_dir(dest, new))
    assert (dest / "config.pbtxt").read_text() == "new\n" and (result.backup / "keep.txt").read_text() == \
        "edited after the review\n"


def test_response_cache_models_reads_the_config_tritonserver_would(tmp_path):
    for name, text in (("a", "response_cache { enable: true }"), ("b", ""), ("c", "not a config {")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')
    (tmp_path / "b" / "configs").mkdir()
    (tmp_path / "b" / "configs" / "x.pbtxt").write_text('name: "b"\nresponse_cache { enable: true }')
    assert response_cache_models(tmp_path) == ["a"]
    assert response_cache_models(tmp_path, "x") == ["a", "b"]
    assert response_cache_models(tmp_path / "absent") == []
