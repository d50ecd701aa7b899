"""SSR for session knobs: new sessions with the new ConfigProto on the same graphs.

The variables stay on the servers (the graphs and the container are the
same), and each worker's input iterator, which has a shared name on its
server, reads on where it stopped. Nothing is moved.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tfonline._calls import until_reachable
from tfonline._sessions import Engine
from tfonline.reconfig.backend import SwitchContext, Switched
from tfonline.setting import short_form

logger = logging.getLogger("tfonline")


def reopen_sessions(engine: Engine, prepared, old: dict[str, Any], new: dict[str, Any],
                    context: SwitchContext) -> Switched:
    """The switch from ``old`` to ``new``, with the sessions and steps ``prepared`` ahead when there are any."""
    started = time.monotonic()
    engine.retire_sessions(context.workers_running)
    if prepared is not None and prepared.steady.sessions:
        opened = prepared.steady
        engine.sessions, steps, apply = opened.sessions, opened.steps, opened.apply
    else:
        engine.sessions = [engine.session(wg, new) for wg in engine.graphs]
        for session, wg in zip(engine.sessions, engine.graphs):
            until_reachable(lambda: session.run(wg.probe_op))
        steps, apply = engine.make_steps(engine.sessions, engine.graphs, new)
    logger.info("reconfiguration %s -> %s by SSR: sessions reopened in %.2f s", short_form(old), short_form(new),
                time.monotonic() - started)
    return Switched(steps, apply, 0)
