"""Model families ``new-pipeline --from FAMILY --model FILE`` writes a whole pipeline for (listed in :mod:`builders.scaffold`)."""
