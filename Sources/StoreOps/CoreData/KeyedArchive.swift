import Foundation

/// Read access to an NSKeyedArchiver property list without decoding its classes.
///
/// A keyed archive is a plist `{ $archiver, $top, $objects }` where objects refer to each other by
/// UID (an index into `$objects`) and name their class through `$class`. Core Data's classes do
/// not exist on Linux, so instead of unarchiving we look objects up by class name and follow the
/// few keys we need.
struct KeyedArchive {
    let objects: [Any]

    init(plist data: Data) throws {
        let root: Any
        // Checked first: Foundation's parser can crash the process on a damaged binary plist.
        if let problem = BinaryPlistCheck.problem(data) { throw StoreOpsError(.badData, "not a readable property list (\(problem))") }
        do {
            root = try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        } catch {
            throw StoreOpsError(.badData, "not a property list (\(error.localizedDescription))")
        }
        guard let dict = root as? [String: Any], let objects = dict["$objects"] as? [Any] else {
            throw StoreOpsError(.badData, "not a keyed archive (no $objects)")
        }
        self.objects = objects
    }

    /// The index a UID refers to.
    ///
    /// Foundation on Linux hands archive UIDs back as an internal `_NSKeyedArchiverUID` class whose
    /// index is not public API; its single stored property `value` is read through reflection.
    /// The fixture tests (real Notes and Photos stores) fail loudly if that ever changes.
    static func uid(_ value: Any?) -> Int? {
        guard let value else { return nil }
        if let dict = value as? [String: Any], let number = dict["CF$UID"] as? Int { return number }
        let typeName = String(describing: type(of: value))
        guard typeName.contains("KeyedArchiverUID") else { return nil }
        for child in Mirror(reflecting: value).children where child.label == "value" {
            if let n = child.value as? UInt32 { return Int(n) }
            if let n = child.value as? Int { return n }
            if let n = child.value as? UInt64 { return Int(n) }
        }
        return nil
    }

    func object(_ reference: Any?) -> Any? {
        guard let index = Self.uid(reference), index > 0, index < objects.count else { return nil }
        return objects[index]
    }

    func className(of object: Any) -> String? {
        guard let dict = object as? [String: Any],
              let classInfo = self.object(dict["$class"]) as? [String: Any] else { return nil }
        return classInfo["$classname"] as? String
    }

    /// Indices of every object of the given class.
    func indices(ofClass name: String) -> [Int] {
        objects.indices.filter { className(of: objects[$0]) == name }
    }

    /// A string stored directly, or as an NSString/NSMutableString object.
    func string(_ reference: Any?) -> String? {
        guard let target = object(reference) else { return nil }
        if let text = target as? String { return text }
        if let dict = target as? [String: Any] { return dict["NS.string"] as? String }
        return nil
    }

    /// The members of an NSArray/NSSet object (`NS.objects`), as references.
    func array(_ reference: Any?) -> [Any]? {
        guard let dict = object(reference) as? [String: Any] else { return nil }
        return dict["NS.objects"] as? [Any]
    }
}
