// Short descriptions and mirrors of the objects an application holds, so that `print`,
// `dump` and a failing test's message show a handful of fields (where, which version, how
// deep, how much is staged) instead of walking the engine's caches and trees.

extension Store: CustomStringConvertible, CustomReflectable {
    public var description: String {
        "Store(\(isInMemory ? "in memory" : backend.location), version \(version))"
    }

    public var customMirror: Mirror {
        Mirror(self, children: [
            "path": isInMemory ? "in memory" : backend.location,
            "version": version,
            "durability": "\(engine.options.log.durability)",
        ], displayStyle: .class)
    }
}

extension Context: CustomStringConvertible, CustomReflectable {
    public var description: String {
        let kind = parent == nil ? (isReadOnly ? "read-only root" : "root") : "child at depth \(depth)"
        return "Context(\(kind), version \(version), \(changeCount) staged, \(status))"
    }

    public var customMirror: Mirror {
        Mirror(self, children: [
            "depth": depth,
            "version": version,
            "staged": changeCount,
            "status": "\(status)",
            "mergePolicy": "\(mergePolicy)",
            "isReadOnly": isReadOnly,
        ], displayStyle: .class)
    }
}

extension UnitOfWork: CustomStringConvertible, CustomReflectable {
    public var description: String {
        "UnitOfWork(depth \(context.depth), version \(context.version), \(context.changeCount) staged, \(context.status))"
    }

    public var customMirror: Mirror {
        Mirror(self, children: ["context": context], displayStyle: .class)
    }
}
