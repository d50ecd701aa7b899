from __future__ import annotations

import pytest

from tfonline.exceptions import ConfigurationError
from tfonline.setting import KNOB_NAMES, default_setting, resolve_setting, session_config, setting_key, short_form


pytestmark = pytest.mark.fast  # no TensorFlow cluster: `pytest -m fast` runs these in under a minute


def test_table_has_the_eleven_knobs_of_the_paper():
    assert len(KNOB_NAMES) == 11
    assert KNOB_NAMES[:2] == ("ps", "worker")


def test_defaults_fill_unset_knobs_and_worker_follows_ps():
    s = resolve_setting({"ps": 2}, node_count=4, cores=2)
    assert s["ps"] == 2 and s["worker"] == 2
    assert s["intra_op_parallelism_threads"] == 2
    assert set(s) == set(KNOB_NAMES)
    assert resolve_setting(None, 4, 2) == default_setting(4, 2)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"ps_count": 1}, r"unknown knob 'ps_count'; known knobs: ps, worker"),
        ({"ps": 2, "worker": 3}, r"ps \+ worker must be <= 4 \(the cluster's nodes\), got 2 \+ 3 = 5"),
        ({"intra_op_parallelism_threads": 0}, r"intra_op_parallelism_threads must be in \[1, 2\], got 0"),
        ({"inter_op_parallelism_threads": 3}, r"inter_op_parallelism_threads must be in \[1, 2\], got 3"),
        ({"ps": 0}, r"knob ps must be in \[1, 3\], got 0"),
        ({"worker": 1.5}, r"knob worker must be an integer in \[1, 3\], got 1.5"),
        ({"infer_shapes": 1}, r"knob infer_shapes must be True or False, got 1"),
        ({"global_jit_level": "ON_3"}, r"knob global_jit_level must be one of OFF, ON_1, ON_2, got 'ON_3'"),
        ({"max_folded_constant_in_bytes": 10}, r"max_folded_constant_in_bytes must be in \[1024, 104857600\], got 10"),
    ],
)
def test_invalid_settings_are_refused_with_expected_and_got(setting, message):
    with pytest.raises(ConfigurationError, match=message):
        resolve_setting(setting, node_count=4, cores=2)


def test_setting_must_be_a_dict():
    with pytest.raises(ConfigurationError, match="setting must be a dict of knob values, got list"):
        resolve_setting([1, 2], 4, 2)


def test_setting_key_is_stable_and_content_based():
    a = resolve_setting({"ps": 1}, 4, 2)
    b = resolve_setting({"worker": 3}, 4, 2)
    assert setting_key(a) == setting_key(b)
    assert setting_key(a) != setting_key(resolve_setting({"ps": 2}, 4, 2))
    assert short_form(a).startswith("ps1 w3 t2/2 jit:OFF")


@pytest.mark.parametrize("folded, shown", [(1024, "fold:1K "), (10 * 1024 * 1024, "fold:10M "),
                                           (int(9.77 * 1024 * 1024), "fold:9.77M "), (1_024_000, "fold:1000K "),
                                           (1_047_552, "fold:1023K "), (100 * 1024, "fold:100K ")])
def test_the_short_form_shows_a_byte_size_in_plain_figures(folded, shown):
    """A benchmark table showed "fold:1e+03K" for 1,000 KiB."""
    assert shown in short_form(resolve_setting({"max_folded_constant_in_bytes": folded}, 4, 2)) + " "


def test_every_session_knob_reaches_the_config_proto():
    setting = resolve_setting(
        {
            "do_common_subexpression_elimination": False,
            "max_folded_constant_in_bytes": 4096,
            "do_function_inlining": False,
            "global_jit_level": "ON_2",
            "infer_shapes": True,
            "place_pruned_graph": True,
            "enable_bfloat16_sendrecv": True,
        },
        4,
        2,
    )
    config = session_config(setting, ["/job:node/task:0"])
    opt = config.graph_options.optimizer_options
    assert opt.do_common_subexpression_elimination is False
    assert opt.max_folded_constant_in_bytes == 4096
    assert opt.do_function_inlining is False
    assert opt.global_jit_level == 2
    assert config.graph_options.infer_shapes is True
    assert config.graph_options.place_pruned_graph is True
    assert config.graph_options.enable_bfloat16_sendrecv is True
    assert list(config.device_filters) == ["/job:node/task:0"]
