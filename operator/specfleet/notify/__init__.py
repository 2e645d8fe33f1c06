"""Notifications of a fleet's rollout, as pure functions: which transitions a pass made (from the status it read
and the status it writes), what a notification says (a CloudEvent, a chat message), and which targets may be
sent to (the operator's, and a namespace's own under the admin's URL allow-list), with their secrets kept out of
every log line. The shell (`controller.notifier`) delivers them off the reconcile path.
"""
