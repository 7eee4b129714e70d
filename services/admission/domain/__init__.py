"""Admission's pure rules: validation of every input (``validation/``, the image checks in
``images``), strict JSON body parsing (``jsonbody``) and waiting for a Turn (``waiting``). No
Kafka or MongoDB import."""
