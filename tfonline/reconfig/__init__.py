"""Online reconfiguration: ``Reconfig(old, new)`` by ODMR, SSR and TDR, or checkpoint-restart.

Not built yet (see the README's Status).
"""
