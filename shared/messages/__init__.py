"""The records on Kafka: their schema names and the harness and placement names their fields take
(``schemas``), each spelled once; builders, decoders and the public contracts import them."""
