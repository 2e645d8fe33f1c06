-- As `kubectl specfleet abort`: the annotation specfleet.io/abort, bound to the revision it is for.
local os = require("os")
local status = obj.status or {}
local target = nil
if status.canaryRevision ~= nil and status.canaryRevision ~= status.stableRevision then
  target = status.canaryRevision
end
if target == nil then
  error("no canary to abort; nothing written")
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["specfleet.io/abort"] = "user revision=" .. target .. " " .. os.date("!%Y-%m-%dT%H:%M:%S+00:00")
return obj
