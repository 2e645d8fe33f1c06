-- As `kubectl specfleet promote --full`: the annotation specfleet.io/promote, bound to the revision it is for.
local os = require("os")
local status = obj.status or {}
local target = nil
if status.canaryRevision ~= nil and status.canaryRevision ~= status.stableRevision then
  target = status.canaryRevision
end
if target == nil then
  error("no canary to promote; nothing written")
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["specfleet.io/promote"] = "full revision=" .. target .. " " .. os.date("!%Y-%m-%dT%H:%M:%S+00:00")
return obj
