"""The receipt tracker's pure rules: the one deadline queue of every open receipt window
(``deadlines``). No Kafka or MongoDB import."""
