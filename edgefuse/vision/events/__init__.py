"""Events out: line crossings, zone entries and exits, streams down and up, to MQTT or a webhook.

An event is a JSON object with at least ``type``, ``stream`` and ``time`` (seconds since the
epoch); each publisher keeps a bounded queue of its own so that a broker or a web server that is
away never stalls the pipeline, and says how many events it had to drop.
"""
