-- As `kubectl specfleet pause`: spec.paused set to true.
obj.spec.paused = true
return obj
