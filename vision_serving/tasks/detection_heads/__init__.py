"""Detection heads: how a detector's raw outputs become boxes, one module per output format.

Listed in :mod:`.registry`; the detection task (:mod:`vision_serving.tasks.detection`) picks
one by its config's ``head`` parameter and does the rest (the map back to the photo's pixels,
labels, padding, drift features, gates, clients) the same for all.
"""
