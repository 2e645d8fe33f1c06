-- As `kubectl specfleet resume`: spec.paused set to false.
obj.spec.paused = false
return obj
