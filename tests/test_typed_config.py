"""``ExportConfig`` and ``JobConfig`` (core/spec.py) are written out as typed dataclasses;
the options they hold are declared in core/options.py. These tests hold the two the same:
a new option is its declaration and its field, with the same name and default."""

import dataclasses

import pytest

from pteforge.core import options, spec


def _declared(held):
    """What a config made from the declarations has: its fields in order, by name, with
    their defaults (``dataclasses.MISSING`` for a required option)."""
    return [(o.attr, dataclasses.MISSING if o.required else o.default) for o in held]


def _written(cls):
    return [(f.name, f.default) for f in dataclasses.fields(cls)]


def test_export_config_holds_every_artifact_and_run_option_with_its_default_and_nothing_else():
    held = [o for o in options.config_fields() if o.role in (options.ARTIFACT, options.RUN)]
    assert _written(spec.ExportConfig) == _declared(held)
    assert all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(spec.ExportConfig))


def test_job_config_holds_the_artifact_options_and_the_run_options_marked_jobs_and_nothing_else():
    held = [o for o in options.config_fields() if o.role == options.ARTIFACT or o.jobs]
    assert _written(spec.JobConfig) == _declared(held)
    assert {f.name for f in dataclasses.fields(spec.JobConfig)} <= {f.name for f in dataclasses.fields(spec.ExportConfig)}


def test_the_artifact_and_run_fields_follow_the_roles_declared():
    held = options.config_fields()
    assert spec.ExportConfig.ARTIFACT_FIELDS == tuple(o.attr for o in held if o.role == options.ARTIFACT)
    assert spec.ExportConfig.RUN_FIELDS == tuple(o.attr for o in held if o.role == options.RUN)


def test_the_configs_are_frozen_typed_dataclasses(tmp_path):
    for cls in (spec.ExportConfig, spec.JobConfig):
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        assert all(f.type not in ("object", object) for f in dataclasses.fields(cls)), cls
    config = spec.ExportConfig(out_dir=tmp_path, weights="none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    assert spec.ExportConfig.from_options({"out": str(tmp_path), "weights": "none"}) == config
    assert config.for_jobs() == spec.JobConfig(out_dir=tmp_path, weights="none")


def test_a_config_refuses_what_the_command_line_refuses(tmp_path):
    from pteforge.core.errors import UsageError

    for bad in ({"seed": -1}, {"jobs": 0}, {"executor": "dask"}, {"timeout": 0.0}, {"tolerance": float("nan")},
                {"ray_address": "10.0.0.5:6379"}, {"base_url": "models/"}, {"weights": str(tmp_path / "none.pt")}):
        with pytest.raises(UsageError):
            spec.ExportConfig(out_dir=tmp_path, **bad)
