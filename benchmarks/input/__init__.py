"""The input pipeline: its rate, memory and bytes per batch, against the TF OD API's tf.data
and against the train step it feeds; TFRecords against COCO JSON, a bucket against disk."""
