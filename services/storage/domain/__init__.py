"""Storage's pure rules: the Session state machine (``sessions``) and the agent messages it
derives (``agent_output``). No Kafka or MongoDB import."""
