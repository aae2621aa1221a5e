"""shim/params.py: every training parameter declared once, read by TrainConfig.check, the
argparse options and the compressors' constructors -- the same refusal, in the same words, from
each of them."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from gradblock import cli  # noqa: E402
from gradblock.refmodel.validation import KError, NormError  # noqa: E402
from gradblock.shim import params  # noqa: E402
from gradblock.shim.compress import compressors as C  # noqa: E402
from gradblock.shim.compress.compressors import LayerInfo  # noqa: E402
from gradblock.shim.errors import ConfigError  # noqa: E402
from gradblock.shim.setup.config import TrainConfig  # noqa: E402

LAYERS = [LayerInfo(0, "w", (4, 3)), LayerInfo(1, "b", (4,))]


def test_every_field_is_declared_once():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert fields == set(params.PARAMS)
    assert {n for fs, _ in params.RULES for n in fs} <= fields


def test_the_defaults_pass_their_own_declaration():
    TrainConfig().check()


# (field, a bad value, the option that gives it, the same value as text)
BAD = [("epochs", 0, "--epochs", "0"), ("batch_size", -1, "--batch-size", "-1"),
       ("lr", 0.0, "--lr", "0"), ("momentum", 1.0, "--momentum", "1"),
       ("sparsity_warmup_fraction", 0.0, "--sparsity-warmup-fraction", "0"),
       ("weight_decay", -0.5, "--weight-decay", "-0.5"), ("density", 1.5, "--density", "1.5"),
       ("dlgs_interval", 0, "--dlgs-interval", "0"), ("timeout", 0.0, "--timeout", "0")]


@pytest.mark.parametrize("field,value,option,text", BAD, ids=[b[0] for b in BAD])
def test_library_and_command_line_refuse_in_the_same_words(field, value, option, text, capsys):
    with pytest.raises(ConfigError) as info:
        TrainConfig(**{field: value}).check()
    words = str(info.value)
    assert words.startswith(f"{field} must be")
    assert cli.main(["train", "--data", "digits", option, text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words.split(", got")[0] in err, err


def test_the_compressors_read_the_same_declaration():
    for kw, field in ((dict(density=1.5), "density"), (dict(interval=0), "dlgs_interval")):
        name = "topk" if field == "density" else "dlgs"
        with pytest.raises(ConfigError) as lib:
            C.build_compressor(name, LAYERS, 1, **kw)
        value = next(iter(kw.values()))
        with pytest.raises(ConfigError) as cfg:
            TrainConfig(compressor=name, **{field: value}).check()
        assert str(lib.value) == str(cfg.value)
    with pytest.raises(KError):                      # the contract's parameters: its named errors
        C.build_compressor("coarse", LAYERS, 1, k=0)
    with pytest.raises(NormError):
        C.build_compressor("coarse", LAYERS, 1, norm="l3")


def test_the_allreduce_rule_is_one_rule():
    """Global block selection sums L1 norms of the coarse compressor: the same refusal from the
    config and from the compressor (there were three copies of it)."""
    with pytest.raises(ConfigError) as cfg:
        TrainConfig(exchange="allreduce", norm="l2", local_momentum=0.0).check()
    with pytest.raises(ConfigError) as lib:
        C.CoarseCompressor(LAYERS, 1, exchange="allreduce", norm="l2")
    assert str(cfg.value) == str(lib.value) and "L1" in str(lib.value)
    with pytest.raises(ConfigError, match="allgather unless --compressor coarse"):
        C.build_compressor("topk", LAYERS, 1, exchange="allreduce")


def test_rules_run_only_when_their_fields_are_given():
    params.check_values({"exchange": "allreduce"})          # no compressor, no norm: no rule
    with pytest.raises(ConfigError, match="l2"):
        params.check_values({"exchange": "allreduce", "compressor": "coarse", "norm": "l2"})
    with pytest.raises(KeyError, match="not a training parameter"):
        params.check_values({"colour": "red"})


def test_a_list_option_checks_each_element(capsys):
    assert cli.main(["train", "--data", "digits", "--lr-schedule", "step", "--lr-milestones",
                     "1", "0"]) == 2
    assert "lr_milestones must be a finite number > 0" in capsys.readouterr().err
