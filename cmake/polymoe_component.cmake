# What the optional components (CUDA, Python) share: the cache option POLYMOE_<NAME> (AUTO, ON or
# OFF) and, once the component's own checks have run, the one outcome: its folder added, or a
# configure error (ON), or a printed reason it is skipped (AUTO, OFF).

# polymoe_component_mode(NAME DOC): defines POLYMOE_<NAME> and sets polymoe_component_mode to its
# upper-cased value, an error unless AUTO, ON or OFF.
macro(polymoe_component_mode name doc)
  set(POLYMOE_${name} AUTO CACHE STRING "${doc}: AUTO, ON or OFF")
  set_property(CACHE POLYMOE_${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${POLYMOE_${name}}" polymoe_component_mode)
  if(NOT polymoe_component_mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "polymoe: POLYMOE_${name} must be AUTO, ON or OFF, got '${POLYMOE_${name}}'")
  endif()
endmacro()

# polymoe_component_finish(NAME LABEL HAS REASON WHAT DIR): with HAS true, prints
# "polymoe: LABEL component: WHAT" and adds DIR; else fails when POLYMOE_<NAME> is ON, and prints
# "polymoe: LABEL component skipped: REASON" otherwise.
macro(polymoe_component_finish name label has reason what dir)
  if(${has})
    message(STATUS "polymoe: ${label} component: ${what}")
    add_subdirectory(${PROJECT_SOURCE_DIR}/${dir} ${PROJECT_BINARY_DIR}/${dir})
  elseif(polymoe_component_mode STREQUAL "ON")
    message(FATAL_ERROR "polymoe: POLYMOE_${name}=ON but the ${label} component cannot be built: ${reason}")
  else()
    message(STATUS "polymoe: ${label} component skipped: ${reason}")
  endif()
endmacro()
