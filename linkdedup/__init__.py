"""objbtf's link step, as named passes over the per-object BTF.

concat -> relocate -> datasec -> functions -> dedup -> emit; ``pipeline``
runs them in that order.
"""
