-- The commands `kubectl specfleet` offers, enabled when the CLI would act (it refuses the others).
local actions = {}
local status = obj.status or {}
local canary = status.canaryRevision ~= nil and status.canaryRevision ~= status.stableRevision
local paused = obj.spec.paused == true
actions["promote"] = {["disabled"] = not canary}
actions["promote-full"] = {["disabled"] = not canary}
actions["abort"] = {["disabled"] = not canary}
actions["retry"] = {["disabled"] = status.rejectedRevision == nil}
actions["pause"] = {["disabled"] = paused}
actions["resume"] = {["disabled"] = not paused}
return actions
