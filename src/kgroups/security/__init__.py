"""Who is on the other end of a connection: SASL mechanisms, credentials and tokens.

Sans-IO like the coordinator core: every mechanism is a state machine fed the client's
bytes and the time, answering with bytes to send back, the authenticated principal, or a
refusal whose message is safe to show the client. The server's edge (and the member
library's links, for the client side) do the I/O.
"""
