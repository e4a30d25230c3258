"""Record batches, magic v2: the unit the broker stores and serves untouched.

``batch`` reads and checks batch headers and patches the fields outside the CRC (base
offset, leader epoch); ``record`` encodes and decodes the records inside a batch;
``compression`` holds the codecs; ``builder`` makes whole batches (for tools and tests).
The broker's hot path only ever touches ``batch``.
"""
