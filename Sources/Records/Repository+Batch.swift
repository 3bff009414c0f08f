// Changing many records at once: every record a predicate holds for is deleted or updated
// through the same path as one `delete` or `update`, so indexes, unique values,
// relationships and their delete rules, the change feed and observers stay exact.
import StrataContexts
import Foundation

extension Repository {
    /// Stages the removal of every record `predicate` holds for (all when nil), each as
    /// `delete` removes one; returns how many. Throws what `delete` throws (a relationship
    /// whose delete rule denies it, say); the records staged before stay staged, so run it
    /// in a unit of work, which rolls back as one.
    @discardableResult
    public func deleteAll(where predicate: Predicate<R>? = nil) throws -> Int {
        var ids: [R.ID] = []
        try forEachMatch(predicate) { ids.append($0.id) }
        // A delete rule may have removed a later match already (a cascade within the entity).
        var deleted = 0
        for id in ids where try context.contains(recordPrefix + id.keyBytes) {
            try delete(id)
            deleted += 1
        }
        return deleted
    }

    /// Changes every record `predicate` holds for (all when nil) with `change` and stages
    /// it as `update` does; returns how many. A record `change` leaves equal to what it was
    /// is not written. Throws `RecordError.invalidQuery` when `change` changes a record's
    /// id, and what `update` throws (a unique value already held, a related record that
    /// does not exist); run it in a unit of work, which rolls back as one.
    @discardableResult
    public func updateAll(where predicate: Predicate<R>? = nil, _ change: (inout R) throws -> Void) throws -> Int {
        var records: [R] = []
        try forEachMatch(predicate) { records.append($0) }
        var updated = 0
        for record in records {
            var changed = record
            try change(&changed)
            guard changed.id == record.id else {
                throw RecordError.invalidQuery("updateAll changed the id of \(shape.entityName) \(record.id) to \(changed.id); "
                    + "ids are the records' keys: insert a new record and delete the old one instead")
            }
            let before = try RecordEncoder().encode(record), after = try RecordEncoder().encode(changed)
            guard before != after else { continue }
            try update(changed)
            updated += 1
        }
        return updated
    }
}
