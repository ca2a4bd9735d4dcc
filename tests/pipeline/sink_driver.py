"""A streaming job for the sink's crash test, run as its own driver process:
mqfs SOURCE -> writeStream.format("mqfs") -> TARGET, Trigger.AvailableNow, small batches."""

import sys

from mqfs.pipeline.spark import session

source, target, ckpt = sys.argv[1:4]
spark = session("local[2]", app="mqfs-sink-test")
q = (spark.readStream.format("mqfs").options(startingOffsets="earliest", maxOffsetsPerTrigger="300").load(source)
     .select("topic", "queue_id", "body", "keys", "tags")
     .writeStream.format("mqfs").option("checkpointLocation", ckpt).trigger(availableNow=True)
     .start(target))
q.awaitTermination()
spark.stop()
