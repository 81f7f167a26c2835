"""optimize/rules"""
