"""Progress estimators: remaining iterations from a convergence bound.

Not built yet (see the README's Status).
"""
