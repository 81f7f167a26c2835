"""optimize/passes"""
