"""vision_serving.cpu_sizing: cgroup values -> the preprocess steps' instances and decode threads."""

from __future__ import annotations

from pathlib import Path

import pytest

from vision_serving import cpu_sizing, layout, model_config
from vision_serving.layout import MODEL_REPOSITORY


def cgroup(tmp_path: Path, cpu_max: str | None, nested: str | None = None) -> tuple[Path, Path]:
    """A cgroup v2 tree (root cpu.max, optionally a child's) and the /proc/self/cgroup naming the child."""
    root = tmp_path / "cgroup"
    child = root / "kubepods" / "pod1" / "triton"
    child.mkdir(parents=True)
    if cpu_max is not None:
        (child / "cpu.max").write_text(cpu_max + "\n")
    if nested is not None:
        (root / "kubepods" / "cpu.max").write_text(nested + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/kubepods/pod1/triton\n")
    return root, proc


@pytest.mark.parametrize(
    ("cpu_max", "affinity", "cpus", "source"),
    [
        ("100000 100000", 64, 1.0, "cgroup cpu.max"),
        ("200000 100000", 64, 2.0, "cgroup cpu.max"),
        ("800000 100000", 64, 8.0, "cgroup cpu.max"),
        ("3200000 100000", 64, 32.0, "cgroup cpu.max"),
        ("max 100000", 16, 16.0, "CPU affinity"),  # no limit: the CPUs it may run on
        (None, 2, 2.0, "CPU affinity"),  # no cpu.max file at all (cgroup v1 host, or no cpu controller)
        ("150000 100000", 64, 1.5, "cgroup cpu.max"),  # fractional: 1500m
        ("50000 100000", 64, 0.5, "cgroup cpu.max"),
        ("800000 100000", 2, 2.0, "CPU affinity"),  # taskset / cpuset narrower than the quota
    ],
)
def test_the_limit_is_the_cgroup_quota_or_the_affinity_whichever_is_smaller(tmp_path, cpu_max, affinity, cpus, source):
    root, proc = cgroup(tmp_path, cpu_max)
    limit = cpu_sizing.cpu_limit(root, proc, affinity=lambda: affinity)
    assert (limit.cpus, limit.source) == (cpus, source)


def test_a_parent_cgroups_smaller_limit_wins(tmp_path):
    root, proc = cgroup(tmp_path, "800000 100000", nested="300000 100000")
    assert cpu_sizing.cpu_limit(root, proc, affinity=lambda: 64).cpus == 3.0


@pytest.mark.parametrize("mount", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1_quota_of_this_process_cgroup(tmp_path, mount):
    root = tmp_path / "cgroup"
    (root / mount / "docker" / "abc").mkdir(parents=True)
    (root / mount / "cpu.cfs_quota_us").write_text("-1\n")  # the host: unlimited
    (root / mount / "cpu.cfs_period_us").write_text("100000\n")
    (root / mount / "docker" / "abc" / "cpu.cfs_quota_us").write_text("400000\n")
    (root / mount / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"4:{mount}:/docker/abc\n3:memory:/docker/abc\n0::/\n")
    limit = cpu_sizing.cpu_limit(root, proc, affinity=lambda: 64)
    assert (limit.cpus, limit.source) == (4.0, "cgroup cfs quota")
    (root / mount / "docker" / "abc" / "cpu.cfs_quota_us").write_text("-1\n")  # unlimited
    assert cpu_sizing.cpu_limit(root, proc, affinity=lambda: 64).cpus == 64.0


@pytest.mark.parametrize(
    ("cpus", "share", "expected"),
    [
        (1, 1.0, (1, 1, 1)),
        (2, 1.0, (2, 2, 1)),  # this machine: the shipped count 2, one thread
        (8, 1.0, (8, 8, 1)),
        (16, 1.0, (16, 8, 2)),
        (32, 1.0, (32, 8, 4)),
        (1.5, 1.0, (2, 2, 1)),  # a fraction of a CPU still gets its worker
        (0.5, 1.0, (1, 1, 1)),
        (32, 0.25, (8, 8, 1)),
        (64, 0.5, (32, 8, 4)),
        (8, 0.1, (1, 1, 1)),
    ],
)
def test_one_worker_per_cpu_of_the_share_in_at_most_max_instances_processes(cpus, share, expected):
    chosen = cpu_sizing.step_layout(cpus, share, max_instances=8)
    assert (chosen.workers, chosen.instances, chosen.threads) == expected
    assert chosen.instances * chosen.threads >= chosen.workers


@pytest.mark.parametrize("step", ["preprocess", "postprocess"])
def test_the_shipped_configs_are_sized_to_themselves_on_two_cpus(step):
    for pipeline in layout.pipelines(MODEL_REPOSITORY):
        path = pipeline.model_dir(step) / "config.pbtxt"
        text, chosen = cpu_sizing.sized_config_text(path.read_text(), 2.0, path)
        assert chosen is not None, f"{path}: not sized"
        assert model_config.parse_config_text(text) == model_config.parse_config_text(path.read_text())  # nothing changes


def test_a_step_without_decode_threads_gets_instances_only():
    path = layout.pipeline("image_classifier").model_dir("postprocess") / "config.pbtxt"
    text, chosen = cpu_sizing.sized_config_text(path.read_text(), 64.0, path)
    assert chosen is not None and str(chosen) == "8 instance(s)"  # cpu_share 0.5 x 64 = 32 workers, at most 8
    sized = model_config.parse_config_text(text)
    assert sized.instance_group[0].count == 8 and "decode_threads" not in sized.parameters


def test_a_config_without_a_share_is_left_as_it_is():
    path = layout.pipeline("image_classifier").model_dir("core") / "config.pbtxt"
    assert cpu_sizing.sized_config_text(path.read_text(), 32.0, path) == (path.read_text(), None)


@pytest.mark.parametrize(
    ("parameter", "message"),
    [
        ('{ key: "cpu_share", value: { string_value: "lots" } }', "parameter cpu_share must be a number, found 'lots'"),
        ('{ key: "cpu_share", value: { string_value: "1.5" } }', r"cpu_share must be in \(0, 1\]"),
        ('{ key: "cpu_share", value: { string_value: "1" } }, { key: "max_instances", value: { string_value: "0" } }',
         "max_instances must be at least 1"),
    ],
)  # fmt: skip
def test_bad_sizing_parameters_are_refused_in_one_line(parameter, message):
    text = f'name: "m"\nbackend: "python"\ninstance_group [ {{ kind: KIND_CPU count: 2 }} ]\nparameters [ {parameter} ]\n'
    with pytest.raises(cpu_sizing.SizingError, match=message):
        cpu_sizing.sized_config_text(text, 4.0, Path("m/config.pbtxt"))


def test_the_sized_view_links_everything_and_rewrites_only_the_sized_configs(tmp_path):
    pipelines = layout.pipelines(MODEL_REPOSITORY)
    layouts = cpu_sizing.size_repository(pipelines, tmp_path / "view", 16.0)
    assert set(layouts) == {pipeline.model_name(step) for pipeline in pipelines for step in ("preprocess", "postprocess")}
    for pipeline in pipelines:
        view = tmp_path / "view" / pipeline.name
        assert (view / "pipeline.toml").resolve() == (pipeline.repository / "pipeline.toml").resolve()
        assert (view / pipeline.model_name("core")).is_symlink()
        preprocess = view / pipeline.model_name("preprocess")
        assert not preprocess.is_symlink() and (preprocess / "1").is_symlink()
        config = model_config.load_config(preprocess)
        assert config.instance_group[0].count == 8 and config.parameters["decode_threads"].string_value == "2"
    assert not list(MODEL_REPOSITORY.glob("*/*/config.pbtxt.*"))  # the repository itself is not written


def test_a_folder_that_is_not_a_view_is_never_replaced(tmp_path):
    pipelines = layout.pipelines(MODEL_REPOSITORY)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "precious.txt").write_text("keep")
    with pytest.raises(cpu_sizing.SizingError, match="is not a sized view"):
        cpu_sizing.size_repository(pipelines, tmp_path / "models", 2.0)
    assert (tmp_path / "models" / "precious.txt").read_text() == "keep"
    cpu_sizing.size_repository(pipelines, tmp_path / "view", 2.0)
    cpu_sizing.size_repository(pipelines, tmp_path / "view", 4.0)  # a view is replaced at each start
