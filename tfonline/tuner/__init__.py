"""The tuning manager: online Bayesian optimisation of the system setting.

Not built yet (see the README's Status): ``run(tune=True)`` refuses with a
clear error until it lands.
"""
