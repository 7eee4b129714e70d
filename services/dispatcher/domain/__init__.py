"""The dispatcher's pure rules: the Runtime registry model and the binding choice
(``binding``). No Kafka or MongoDB import."""
