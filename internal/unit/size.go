package unit

// ParseSize parses a byte size as systemd writes them ("512M", "4G", "1073741824";
// K, M, G, T are powers of 1024), for flags such as --capacity-memory.
func ParseSize(s string) (int64, error) { return parseBytes(s) }

// ValidateMetadata checks one machine metadata entry set through the API
// (value nil: the key is being removed): the same rules as --metadata.
func ValidateMetadata(key string, value *string) error {
	s := key + "="
	if value != nil {
		s += *value
	} else {
		s += "x"
	}
	_, err := ParseMetadata(s)
	return err
}
