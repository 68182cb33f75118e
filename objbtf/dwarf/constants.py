"""The DWARF tag, attribute and form numbers the loader uses (DWARF 2-5)."""

# Tags.
TAG_array_type = 0x01
TAG_enumeration_type = 0x04
TAG_formal_parameter = 0x05
TAG_lexical_block = 0x0b
TAG_member = 0x0d
TAG_pointer_type = 0x0f
TAG_compile_unit = 0x11
TAG_structure_type = 0x13
TAG_subroutine_type = 0x15
TAG_typedef = 0x16
TAG_union_type = 0x17
TAG_unspecified_parameters = 0x18
TAG_inlined_subroutine = 0x1d
TAG_subrange_type = 0x21
TAG_base_type = 0x24
TAG_const_type = 0x26
TAG_enumerator = 0x28
TAG_subprogram = 0x2e
TAG_variable = 0x34
TAG_volatile_type = 0x35
TAG_restrict_type = 0x37
TAG_unspecified_type = 0x3b
TAG_partial_unit = 0x3c
TAG_atomic_type = 0x47
TAG_class_type = 0x02
TAG_LLVM_annotation = 0x6000

# Attributes.
AT_sibling = 0x01
AT_location = 0x02
AT_name = 0x03
AT_byte_size = 0x0b
AT_bit_offset = 0x0c
AT_bit_size = 0x0d
AT_const_value = 0x1c
AT_inline = 0x20
AT_upper_bound = 0x2f
AT_abstract_origin = 0x31
AT_count = 0x37
AT_data_member_location = 0x38
AT_declaration = 0x3c
AT_encoding = 0x3e
AT_external = 0x3f
AT_specification = 0x47
AT_type = 0x49
AT_data_bit_offset = 0x6b
AT_str_offsets_base = 0x72
AT_addr_base = 0x73
AT_loclists_base = 0x8c
AT_language = 0x13

# Base type encodings.
ATE_boolean = 0x02
ATE_complex_float = 0x03
ATE_float = 0x04
ATE_signed = 0x05
ATE_signed_char = 0x06
ATE_unsigned = 0x07
ATE_unsigned_char = 0x08

# Location operations.
OP_addr = 0x03
OP_plus_uconst = 0x23
OP_addrx = 0xa1
OP_GNU_addr_index = 0xfb
OP_reg0 = 0x50
OP_reg31 = 0x6f
OP_stack_value = 0x9f
OP_entry_value = 0xa3
OP_GNU_entry_value = 0xf3
