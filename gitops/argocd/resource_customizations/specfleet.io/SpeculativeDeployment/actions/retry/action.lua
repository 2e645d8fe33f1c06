-- As `kubectl specfleet retry`: the annotation specfleet.io/retry, bound to the revision it is for.
local os = require("os")
local status = obj.status or {}
local target = status.rejectedRevision
if target == nil then
  error("nothing to retry (no aborted or rolled-back revision); nothing written")
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["specfleet.io/retry"] = "user revision=" .. target .. " " .. os.date("!%Y-%m-%dT%H:%M:%S+00:00")
return obj
