"""Which term of a model's dynamics makes its tracking error: inertia, Coriolis, gravity or
friction.

A model's feed-forward on the figure eight is wrong by ``dH qdd + dc + dg + df`` against the
sim's own model. The demo's loop feeds back through the URDF's mass matrix, so a torque error
``d`` moves the arm as the acceleration ``H_URDF(q)^-1 d`` would: light directions (joint axes that
line up, light wrists) turn small torque errors into large tracking errors. This module splits
that acceleration error by term, so a failed verdict names what to learn better (the inertia
term grows with the square of the speed, gravity does not grow, friction grows slowly).
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from delan_common.dynamics import DynamicsModel
from delan_control.replay import EvaluationSetup, true_model

#: the terms of ``tau = H(q) qdd + c(q, qd) + g(q) + tau_f(qd)``, in that order
TERMS = ('inertia', 'coriolis', 'gravity', 'friction')


def term_errors(
    setup: EvaluationSetup, model: DynamicsModel, speed: float, samples: int = 400
) -> Dict[str, np.ndarray]:
    """Per term of :data:`TERMS` and for their sum (``'total'``): the RMS over the figure eight
    at ``speed`` (after the approach) of ``H_URDF(q)^-1`` times ``model``'s torque error against
    the sim's own model, ``(n,)`` per joint [rad/s^2 or m/s^2]; ``'torque <term>'``: the torque
    error's RMS itself [N m or N]."""
    ref = setup.figure_eight(speed)
    t = np.linspace(ref.t[0] + setup.approach_time, ref.t[-1], samples)
    q, qd, qdd = ref.sample(t)
    truth = true_model(setup)
    errors = {name: np.empty_like(q) for name in TERMS}
    inverse_inertia = np.empty((len(t),) + (q.shape[1],) * 2)
    for i in range(len(t)):
        errors['inertia'][i] = (model.mass_matrix(q[i]) - truth.mass_matrix(q[i])) @ qdd[i]
        errors['coriolis'][i] = model.coriolis(q[i], qd[i]) - truth.coriolis(q[i], qd[i])
        errors['gravity'][i] = model.gravity(q[i]) - truth.gravity(q[i])
        errors['friction'][i] = model.friction(qd[i]) - truth.friction(qd[i])
        inverse_inertia[i] = np.linalg.inv(setup.nominal.mass_matrix(q[i]))
    errors['total'] = sum(errors[name] for name in TERMS)
    out: Dict[str, np.ndarray] = {}
    for name, d in errors.items():
        acc = np.einsum('tij,tj->ti', inverse_inertia, d)
        out[name] = np.sqrt(np.mean(acc**2, axis=0))
        out[f'torque {name}'] = np.sqrt(np.mean(d**2, axis=0))
    return out
